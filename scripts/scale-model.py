#!/usr/bin/env python3
"""The cost model of docs/eval/scale.md: prints its tables from the constants below.

Usage: python3 scripts/scale-model.py
Each constant names the measured point it comes from (docs/eval/scale.csv, pir.csv, pir.md).
Standard library only; the doc's tables are this script's output, pasted.
"""
import math

MB = 1e6
KIB = 1024
MIB = 1024 * KIB

# --- The measured points the constants are fitted to (docs/eval/pir.csv) ---------------------
# Server core-ms a search, AVX2-only AMD EPYC, LWE N = 1,408: 10,000 and 70,000 images at
# ff61238, 1,000,000 at 2d39e9e (2026-12-05). `table` is the ranking-table method, whose server
# work is the 8 thumbnails' SimplePIR pass alone; `scores` is the encrypted-scores method
# (thumbnails + ranking). Geometry: B blocks of R rows of the capped level, and the thumbnail
# database's bytes E (records x items: 294-byte 3-bit records up to 70,000, 70-byte coded
# pictures at 1,000,000).
POINTS = [
    # n, B, R, E (bytes), table core-ms, scores core-ms
    (10_000, 39, 1_024, 10_000 * 294, 2.1, 34.9),
    (70_000, 128, 2_048, 70_000 * 294, 13.2, 82.3),
    (1_000_000, 323, 12_288, 1_000_000 * 70, 35.4, 491.3),
]
# Points measured after the fit, to check it (not fitted): see docs/eval/scale.md.
# 100,000 images, 30 photos, 2026-12-05 with main's release binary of bcbe5ff, the machine at
# load average ~20 (others' compilers): table 21.0, scores 104.2 core-ms (scale.csv).
CHECKS = [(100_000, 176, 2_048, 100_000 * 294, 21.0, 104.2)]
DIM = 64  # features a row; the planes hold dim + 4 norm digits, as two 8-bit planes
COLS = DIM + 4
PLANES = 2
WIDTH = 2_048  # rows a packed ciphertext carries (N/2)
RING_N = 4_096


def scan_bytes(b, r):
    """Bytes of feature planes one ranking reads: every block's rows (pir::scores)."""
    return b * r * COLS * PLANES


def packed(r):
    """Packed ciphertexts an answer holds, in units of a full 2,048-row plan (a narrower
    packing, R < 2,048, costs its width's share)."""
    return math.ceil(r / WIDTH) if r > WIDTH // 2 else r / WIDTH


def fit_ranking():
    """Least squares, no intercept: ranking core-ms = s * scan MB + p * packed ciphertexts,
    the ranking's core-ms being scores minus table (the thumbnails' share) at each point."""
    xs = [(scan_bytes(b, r) / MB, packed(r), sc - tb) for _, b, r, _, tb, sc in POINTS]
    a11 = sum(x * x for x, _, _ in xs)
    a12 = sum(x * y for x, y, _ in xs)
    a22 = sum(y * y for _, y, _ in xs)
    b1 = sum(x * t for x, _, t in xs)
    b2 = sum(y * t for _, y, t in xs)
    det = a11 * a22 - a12 * a12
    return (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det


S_AVX2, P_AVX2 = fit_ranking()
# The thumbnails' pass a MB of database, from the largest point (the table's 35.4 core-ms over
# 70 MB at 1,000,000); smaller galleries pay 0.64-0.71 a MB (per-request overheads).
T_AVX2 = 35.4 / 70.0
# AVX-512 VNNI (2026-11-27, N = 1,024): the kernels at the 1,000,000 shape, one core
# (pir.md: scoring pass 47 ms over 539.8 MB of planes; packing 108 ms for 6 plans, 4ac90fb),
# and the table's 24.1 core-ms over 94-byte records (94 MB). Their sum with the thumbnails,
# 179.1, against the 177.5 measured for the whole search.
S_VNNI = 47.0 / (scan_bytes(323, 12_288) / MB)
P_VNNI = 108.0 / 6
T_VNNI = 24.1 / 94.0

# --- Bytes at 1,000,000 (2026-12-05, 2d39e9e) --------------------------------------------------
THUMB_UP_1M = 634.8 * KIB  # 8 SimplePIR queries
THUMB_DOWN_1M = 30.1 * KIB
ONCE_SCORES_1M = 16_003 * KIB  # public file 6,106 KiB gzip + thumbnail hint, codebook, centroids
PUBLIC_1M = 6_106 * KIB  # the encrypted scores' public file, gzip: every item's id, label,
#                          its rows and thumbnail digests (linear in n)
ONCE_TABLE_1M = 131_598 * KIB  # the ranking table (linear in n) + the same hint and codebook
KEY_BODY = 96 * KIB
CHUNK = RING_N * 8  # a query chunk: 4,096 columns of 8 bytes
ANSWER_CT = WIDTH * 37 // 8  # a packed ciphertext on the wire, 37 bits a coefficient
CODED = 70  # bytes of a coded picture at 1,000,000 (kept beyond)
PLAN_BYTES = 201_261_056  # one 2,048-row packing plan (70,000-image build log, 2026-12-05)
# The process's own memory serving (RssAnon), a line through 70,000 images (0.22 GB after
# pirbench, 2026-12-05, ff61238) and 1,000,000 (0.91 GB, membench 2026-11-27, d961589): the
# catalogue, the partition's document and neighbour lists, the model. Each process holds it whole.
FIXED_GB_0 = 0.22 - 70_000 * (0.91 - 0.22) / 930_000
FIXED_GB_PER_ITEM = (0.91 - 0.22) / 930_000


def geometry(n):
    """B and R: as measured up to 1,000,000; beyond it, the 1,000,000 shape grown by sqrt(n/1M)
    in both directions (rows to a multiple of 2,048), which keeps upload (grows with B) and
    download (with R) balanced. `publish::ranking_spec` today grows R linearly (B ~ 330
    fixed), which past 87M items exceeds the 2^20 rows `ScoreShape::check` allows."""
    for p in POINTS:
        if p[0] == n:
            return p[1], p[2]
    g = math.sqrt(n / 1e6)
    return math.ceil(323 * g), math.ceil(12_288 * g / WIDTH) * WIDTH


def thumbs_bytes(n):
    """(up, down, hint+codebook+centroids) of the thumbnails beyond 1,000,000: a SimplePIR
    database of n * 70 bytes whose columns and rows both grow by sqrt(n/1M) (hint x queries
    grows with the database, so balanced shapes grow both by its square root)."""
    g = math.sqrt(n / 1e6)
    return THUMB_UP_1M * g, THUMB_DOWN_1M * g, (ONCE_SCORES_1M - PUBLIC_1M) * g


def row(n, machine):
    s, p, t = (S_AVX2, P_AVX2, T_AVX2) if machine == "avx2" else (S_VNNI, P_VNNI, T_VNNI)
    b, r = geometry(n)
    e = n * CODED
    scan = scan_bytes(b, r)
    cts = packed(r)
    rank_ms = s * scan / MB + p * cts
    thumb_ms = t * e / MB
    up_t, down_t, hint = thumbs_bytes(n)
    rank_up = KEY_BODY + CHUNK * math.ceil(b * COLS / RING_N)
    rank_down = math.ceil(r / WIDTH) * ANSWER_CT
    plans = math.ceil(r / WIDTH) * PLAN_BYTES
    return dict(
        n=n, b=b, r=r,
        scores_ms=rank_ms + thumb_ms, table_ms=thumb_ms,
        scores_kib=(rank_up + rank_down + up_t + down_t) / KIB,
        table_kib=(up_t + down_t) / KIB,
        scores_once_mib=(PUBLIC_1M * n / 1e6 + hint) / MIB,
        table_once_mib=((ONCE_TABLE_1M - (ONCE_SCORES_1M - PUBLIC_1M)) * n / 1e6 + hint) / MIB,
        planes_gb=scan / 1e9, plans_gb=plans / 1e9, thumbs_gb=e / 1e9,
        db_gb=(scan + plans + e) / 1e9,
        fixed_gb=FIXED_GB_0 + FIXED_GB_PER_ITEM * n,
    )


def machines(ms, db_gb, rate=100, cores=64, load=0.7):
    """Cores busy on average for `rate` searches a second, and machines of `cores` cores at
    `load` of them: every search is one pass over a full copy of the databases, so each
    machine holds (or its shards together hold) one copy and answers its share."""
    need = rate * ms / 1000
    return need, math.ceil(need / (cores * load))


def shards(db_gb, fixed_gb, mem_gb, reserve_gb=8):
    """Row-shard processes (one a machine) one copy needs on machines of `mem_gb` GB,
    `reserve_gb` kept for the system: memory a shard = databases / S + fixed, the fixed part
    (the process's own memory) whole in every shard. None: no S fits."""
    room = mem_gb - reserve_gb - fixed_gb
    return max(1, math.ceil(db_gb / room)) if room > 0 else None


def main():
    print(f"fit (AVX2, 10,000 / 70,000 / 1,000,000): s = {S_AVX2:.4f} core-ms a MB of planes, "
          f"p = {P_AVX2:.1f} core-ms a packed ciphertext; thumbnails {T_AVX2:.3f} core-ms a MB")
    for n, b, r, e, tb, sc in POINTS:
        model = S_AVX2 * scan_bytes(b, r) / MB + P_AVX2 * packed(r)
        print(f"  {n:>9,}: ranking measured {sc - tb:6.1f}, model {model:6.1f} core-ms")
    for n, b, r, e, tb, sc in CHECKS:
        model = S_AVX2 * scan_bytes(b, r) / MB + P_AVX2 * packed(r)
        print(f"  {n:>9,} (not fitted): ranking measured {sc - tb:6.1f}, model {model:6.1f}; "
              f"thumbnails measured {tb:5.1f}, model {T_AVX2 * e / MB:5.1f} core-ms")
    print(f"VNNI: s = {S_VNNI:.4f}, p = {P_VNNI:.1f}, thumbnails {T_VNNI:.3f}")
    print()
    print("| images | B x R | method | CPU | core-ms a search | searches/s a core | KiB a search |"
          " MiB once | databases GB (planes + plans + thumbnails) |")
    print("|---:|---|---|---|---:|---:|---:|---:|---:|")
    for n in (1_000_000, 10_000_000, 100_000_000):
        for machine in ("avx2", "vnni"):
            x = row(n, machine)
            print(f"| {n:,} | {x['b']:,} x {x['r']:,} | encrypted scores | {machine} | "
                  f"{x['scores_ms']:,.0f} | {1000 / x['scores_ms']:.2f} | {x['scores_kib']:,.0f} | "
                  f"{x['scores_once_mib']:,.0f} | {x['db_gb']:,.1f} ({x['planes_gb']:,.1f} + "
                  f"{x['plans_gb']:,.1f} + {x['thumbs_gb']:,.2f}) |")
        x = row(n, "avx2")
        print(f"| {n:,} | — | ranking table | avx2 | {x['table_ms']:,.0f} | "
              f"{1000 / x['table_ms']:.2f} | {x['table_kib']:,.0f} | {x['table_once_mib']:,.0f} | "
              f"{x['thumbs_gb']:,.2f} |")
    print()
    print("100 searches a second at 100,000,000 images (64-core machines at 70 % load):")
    print("| method | CPU | core-s a search | cores busy | 64-core machines | databases GB |"
          " process GB | shards a copy, 256 GB machines | shards a copy, 128 GB machines |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for method, key, dbkey in (("encrypted scores", "scores_ms", "db_gb"),
                               ("ranking table", "table_ms", "thumbs_gb")):
        for machine in ("avx2", "vnni"):
            x = row(100_000_000, machine)
            need, count = machines(x[key], x[dbkey])
            s256, s128 = (shards(x[dbkey], x["fixed_gb"], m) or "none fits" for m in (256, 128))
            print(f"| {method} | {machine} | {x[key] / 1000:.2f} | {need:,.0f} | {count} | "
                  f"{x[dbkey]:,.1f} | {x['fixed_gb']:,.1f} | {s256} | {s128} |")


if __name__ == "__main__":
    main()
