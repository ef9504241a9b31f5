//! How fixed-size records become a byte matrix, and the server's side of the scheme (hint and
//! answers), as pure functions over plain data.
//!
//! A database is `rows × cols` bytes (row-major). A query retrieves one whole column. Records
//! of `record_len` bytes are laid out column-major:
//! - `record_len ≤ rows`: `rows / record_len` records stacked in each column (one query each);
//! - `record_len > rows`: each record spans `record_len / rows` consecutive columns (that many
//!   queries, a public number).
//!
//! Records shorter than `record_len` are zero-padded; the record formats say their own length.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::held::{Held, SharedBytes};
use crate::lwe::{self, LWE_N};

/// Most PIR query vectors in one request (a ranking record of many columns plus the
/// thumbnails of one search): a client never builds more, a server never answers more.
pub const MAX_QUERIES: usize = 128;

/// The public geometry of one PIR database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Bytes of every record (after padding).
    pub record_len: usize,
    /// Number of records.
    pub records: usize,
    /// Bytes per column (`m`).
    pub rows: usize,
    /// Columns (`n`, the LWE samples per secret).
    pub cols: usize,
}

fn invalid(reason: String) -> Error {
    Error::InvalidParameter {
        name: "pir shape",
        reason,
    }
}

impl Shape {
    /// The shape for `records` records of `record_len` bytes in columns of `rows` bytes.
    /// Refuses a layout that does not tile, or whose decryption failure bound per query is
    /// above 2⁻⁴⁰.
    pub fn new(record_len: usize, records: usize, rows: usize) -> Result<Shape> {
        if record_len == 0 || records == 0 || rows == 0 {
            return Err(invalid(
                "record length, record count and rows must be > 0".into(),
            ));
        }
        let cols = if record_len <= rows {
            if !rows.is_multiple_of(record_len) {
                return Err(invalid(format!(
                    "{rows} rows do not hold a whole number of {record_len}-byte records"
                )));
            }
            records.div_ceil(rows / record_len)
        } else {
            if !record_len.is_multiple_of(rows) {
                return Err(invalid(format!(
                    "{record_len}-byte records do not span a whole number of {rows}-byte columns"
                )));
            }
            records
                .checked_mul(record_len / rows)
                .ok_or_else(|| invalid("too many columns".into()))?
        };
        let s = Shape {
            record_len,
            records,
            rows,
            cols,
        };
        s.validate()?;
        Ok(s)
    }

    /// Checks an untrusted shape (e.g. from a server's document) before anything is
    /// allocated from it.
    pub fn validate(&self) -> Result<()> {
        let again = |r: usize, l: usize, m: usize| {
            if l == 0 || m == 0 || r == 0 {
                return None;
            }
            if l <= m {
                m.is_multiple_of(l).then(|| r.div_ceil(m / l))
            } else {
                l.is_multiple_of(m).then(|| r.checked_mul(l / m)).flatten()
            }
        };
        if again(self.records, self.record_len, self.rows) != Some(self.cols) {
            return Err(invalid(
                "record length, rows and columns do not tile".into(),
            ));
        }
        if self.rows > lwe::MAX_ROWS || self.cols > lwe::MAX_COLS {
            return Err(Error::TooLarge {
                what: "pir database side",
                count: self.rows.max(self.cols),
                limit: lwe::MAX_COLS,
            });
        }
        if self.failure_log2() > lwe::MAX_FAILURE_LOG2 {
            return Err(invalid(format!(
                "decryption failure 2^{:.1} per query exceeds 2^{}",
                self.failure_log2(),
                lwe::MAX_FAILURE_LOG2
            )));
        }
        Ok(())
    }

    /// log2 of the probability that one query decodes wrongly.
    pub fn failure_log2(&self) -> f64 {
        lwe::failure_log2(self.rows, self.cols)
    }

    /// Queries (columns) needed for one record.
    pub fn queries_per_record(&self) -> usize {
        if self.record_len <= self.rows {
            1
        } else {
            self.record_len / self.rows
        }
    }

    /// Whether one request can fetch a record: its queries are at most
    /// [`MAX_QUERIES`] (the server offers, and a client plans, nothing else).
    pub fn record_fits_one_request(&self) -> bool {
        self.queries_per_record() <= MAX_QUERIES
    }

    /// The first column of record `r` (it spans [`Self::queries_per_record`] columns).
    pub fn first_column(&self, r: usize) -> usize {
        if self.record_len <= self.rows {
            r / (self.rows / self.record_len)
        } else {
            r * (self.record_len / self.rows)
        }
    }

    /// The record's *unit*: the columns a client decodes when it asks for record `r` (its
    /// own column with the records stacked in it, or the columns it spans). Units are what
    /// a client can check as a whole, so a publisher commits to one digest a unit.
    pub fn unit_of(&self, r: usize) -> usize {
        self.first_column(r) / self.queries_per_record()
    }

    /// Number of units (`cols / queries_per_record`).
    pub fn units(&self) -> usize {
        self.cols / self.queries_per_record()
    }

    /// Unit `u`'s bytes as a client decodes them (its columns concatenated: the linear
    /// column-major bytes `u·w .. (u+1)·w`, `w = rows · queries_per_record`), laid out from the
    /// records that [`Database::build`] would be given (`record(i)`: record `i`, at most
    /// `record_len` bytes, zero-padded). Lets a publisher digest each unit without the matrix.
    pub fn unit_bytes<'a>(&self, u: usize, record: impl Fn(usize) -> &'a [u8]) -> Vec<u8> {
        let w = self.rows * self.queries_per_record();
        let mut out = vec![0u8; w];
        let start = u * w;
        let first = start / self.record_len;
        let last = ((start + w).div_ceil(self.record_len)).min(self.records);
        for i in first..last {
            let base = i * self.record_len;
            for (b, &v) in record(i).iter().take(self.record_len).enumerate() {
                if let Some(at) = (base + b).checked_sub(start).filter(|&at| at < w) {
                    out[at] = v;
                }
            }
        }
        out
    }

    /// Low bits each query value leaves off the wire ([`lwe::wire_bits`]).
    pub fn query_drop(&self) -> u32 {
        lwe::wire_bits(self.rows, self.cols).0
    }

    /// Bits each answer entry keeps on the wire ([`lwe::wire_bits`]).
    pub fn answer_bits(&self) -> u32 {
        lwe::wire_bits(self.rows, self.cols).1
    }

    /// Bytes of one query vector on the wire: `cols` values of `32 −` [`Self::query_drop`]
    /// bits, packed end to end.
    pub fn query_bytes(&self) -> usize {
        crate::bits::packed_len(self.cols, lwe::LOG_Q - self.query_drop())
    }

    /// One query vector's wire form (`values`: `cols` multiples of `2^query_drop`).
    pub fn encode_query(&self, values: &[u32]) -> Vec<u8> {
        debug_assert_eq!(values.len(), self.cols);
        let drop = self.query_drop();
        crate::bits::pack(
            values.iter().map(|&v| u64::from(v >> drop)),
            lwe::LOG_Q - drop,
        )
    }

    /// The query vectors of a request body (a whole number of [`Self::query_bytes`]), each
    /// value as the multiple of `2^query_drop` it stands for, `cols` values a query.
    pub fn decode_queries(&self, body: &[u8]) -> Result<Vec<u32>> {
        let per = self.query_bytes();
        if body.is_empty() || !body.len().is_multiple_of(per) {
            return Err(crate::error::PirError::Malformed(format!(
                "a query body of {} bytes is not a whole number of {per}-byte queries",
                body.len()
            ))
            .into());
        }
        let drop = self.query_drop();
        let mut out = Vec::with_capacity(body.len() / per * self.cols);
        for q in body.chunks_exact(per) {
            let values = crate::bits::unpack(q, self.cols, lwe::LOG_Q - drop)?;
            out.extend(values.into_iter().map(|v| (v as u32) << drop));
        }
        Ok(out)
    }

    /// Bytes of one answer on the wire (`rows` entries of [`Self::answer_bits`], packed end
    /// to end).
    pub fn answer_bytes(&self) -> usize {
        crate::bits::packed_len(self.rows, self.answer_bits())
    }

    /// The answers' wire form: each of the `c × rows` entries (from
    /// [`Database::answer_rows`], query by query) rounded to its top [`Self::answer_bits`],
    /// each query's packed end to end ([`Self::answer_bytes`] a query).
    pub fn encode_answer(&self, values: &[u32]) -> Vec<u8> {
        let a = self.answer_bits();
        values
            .chunks(self.rows)
            .flat_map(|q| crate::bits::pack(q.iter().map(|&v| u64::from(lwe::round_top(v, a))), a))
            .collect()
    }

    /// The entries [`Self::encode_answer`] wrote, each as the multiple of `2^(32 − a)` it
    /// stands for; the bytes must be a whole number of answers.
    pub fn decode_answer(&self, bytes: &[u8]) -> Result<Vec<u32>> {
        let per = self.answer_bytes();
        if !bytes.len().is_multiple_of(per) {
            return Err(crate::error::PirError::AnswerSize {
                expected: per * bytes.len().div_ceil(per),
                got: bytes.len(),
            }
            .into());
        }
        let a = self.answer_bits();
        let mut out = Vec::with_capacity(bytes.len() / per * self.rows);
        for q in bytes.chunks_exact(per) {
            let values = crate::bits::unpack(q, self.rows, a)?;
            out.extend(values.into_iter().map(|v| (v as u32) << (lwe::LOG_Q - a)));
        }
        Ok(out)
    }

    /// Bytes of the hint on the wire (`rows × N` entries of [`lwe::HINT_BITS`]: two in five
    /// bytes; `N` is even).
    pub fn hint_bytes(&self) -> usize {
        self.rows * LWE_N / 2 * 5
    }

    /// Record `r`'s bytes out of its decoded column(s) (`columns` = the
    /// [`Self::queries_per_record`] columns from [`Self::first_column`], concatenated).
    pub fn extract<'a>(&self, r: usize, columns: &'a [u8]) -> Result<&'a [u8]> {
        if r >= self.records || columns.len() != self.queries_per_record() * self.rows {
            return Err(invalid(format!(
                "record {r} of {} from {} column bytes",
                self.records,
                columns.len()
            )));
        }
        if self.record_len <= self.rows {
            let at = (r % (self.rows / self.record_len)) * self.record_len;
            Ok(&columns[at..at + self.record_len])
        } else {
            Ok(columns)
        }
    }
}

/// A database: the shape and its `rows × cols` bytes, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Database {
    pub shape: Shape,
    /// The first row held: 0, or a row shard's first ([`Database::keep_rows`]).
    first_row: usize,
    /// The rows held (all `shape.rows`, or a shard's), row-major.
    data: Held<u8>,
}

impl Database {
    /// Lays out `records` (each at most `shape.record_len` bytes, zero-padded).
    pub fn build<'a>(shape: Shape, records: impl IntoIterator<Item = &'a [u8]>) -> Result<Self> {
        Self::build_rows(shape, records, 0..shape.rows)
    }

    /// Lays out `records` as [`Database::build`] does, holding only rows `held` (a row
    /// shard's, `crate::shard`): what `build` then [`Database::keep_rows`] would hold, without
    /// ever holding the other rows. Refused unless `held` is within the shape's rows.
    pub fn build_rows<'a>(
        shape: Shape,
        records: impl IntoIterator<Item = &'a [u8]>,
        held: std::ops::Range<usize>,
    ) -> Result<Self> {
        let Shape {
            record_len,
            rows,
            cols,
            ..
        } = shape;
        if held.start > held.end || held.end > rows {
            return Err(invalid(format!(
                "rows {held:?} are not within the shape's {rows}"
            )));
        }
        let mut data = vec![0u8; held.len() * cols];
        let mut count = 0;
        for (r, rec) in records.into_iter().enumerate() {
            if r >= shape.records || rec.len() > record_len {
                return Err(invalid(format!(
                    "record {r} ({} bytes) does not fit {} records of {record_len} bytes",
                    rec.len(),
                    shape.records
                )));
            }
            // Byte b of record r sits at linear column-major offset r·record_len + b.
            let base = r * record_len;
            for (b, &v) in rec.iter().enumerate() {
                let at = base + b;
                let row = at % rows;
                if held.contains(&row) {
                    data[(row - held.start) * cols + at / rows] = v;
                }
            }
            count += 1;
        }
        if count != shape.records {
            return Err(invalid(format!(
                "{count} records given for a shape of {}",
                shape.records
            )));
        }
        Ok(Database {
            shape,
            first_row: held.start,
            data: Held::Owned(data),
        })
    }

    /// Keeps only rows `rows` (a row shard's, `crate::shard`), dropping the others: answers
    /// and hints are then asked of those rows only. Refused unless they are within the rows
    /// held, and once the bytes are shared.
    pub fn keep_rows(&mut self, rows: std::ops::Range<usize>) -> Result<()> {
        let held = self.held_rows();
        if rows.start > rows.end || rows.start < held.start || rows.end > held.end {
            return Err(invalid(format!(
                "rows {rows:?} are not within the rows held, {held:?}"
            )));
        }
        let Held::Owned(data) = &mut self.data else {
            return Err(invalid("the rows are shared, not held".into()));
        };
        let cols = self.shape.cols;
        let from = (rows.start - held.start) * cols..(rows.end - held.start) * cols;
        *data = data[from].to_vec();
        self.first_row = rows.start;
        Ok(())
    }

    /// The rows held: `0..shape.rows`, or a shard's.
    pub fn held_rows(&self) -> std::ops::Range<usize> {
        self.first_row..self.first_row + self.data.get().len() / self.shape.cols
    }

    /// The held rows' bytes ([`Database::held_rows`]), row-major.
    pub fn data(&self) -> &[u8] {
        self.data.get()
    }

    /// Bytes [`Database::write_data`] writes.
    pub fn data_len(&self) -> usize {
        self.data.padded_len()
    }

    /// The bytes, padded to a multiple of 8 (what [`Database::share_data`] reads back).
    pub fn write_data(&self, out: &mut (impl std::io::Write + ?Sized)) -> std::io::Result<()> {
        self.data.write(out)
    }

    /// Reads the bytes from `bytes[offset..]`, where [`Database::write_data`] wrote them,
    /// instead of holding them (refused unless they are equal); returns the offset after them.
    pub fn share_data(&mut self, bytes: &SharedBytes, offset: usize) -> Result<usize> {
        self.data.share(bytes, offset)
    }

    /// Whether the bytes are in the database's own memory (not shared).
    pub fn held_in_memory(&self) -> bool {
        self.data.is_owned()
    }

    /// Rows `range` (of the whole database) as indices into the rows held; a caller's bug
    /// if they are not held.
    fn local(&self, range: std::ops::Range<usize>) -> std::ops::Range<usize> {
        let held = self.held_rows();
        assert!(
            range.start >= held.start && range.end <= held.end,
            "rows {range:?} asked of a database holding {held:?}"
        );
        range.start - held.start..range.end - held.start
    }

    /// Rows `range` of the hint `H = (D − 128)·A` (`A` from [`lwe::matrix_a`]), row-major
    /// `len × N`. Servers split the rows over threads.
    pub fn hint_rows(&self, a: &[u32], range: std::ops::Range<usize>) -> Vec<u32> {
        let range = self.local(range);
        let cols = self.shape.cols;
        debug_assert_eq!(a.len(), cols * LWE_N);
        let mut out = vec![0u32; range.len() * LWE_N];
        // Tiles of A rows that stay in cache while every output row of the range passes.
        const TILE: usize = 64;
        for j0 in (0..cols).step_by(TILE) {
            let j1 = (j0 + TILE).min(cols);
            for (h, i) in out.chunks_exact_mut(LWE_N).zip(range.clone()) {
                let row = &self.data()[i * cols..(i + 1) * cols];
                for j in j0..j1 {
                    let d = (row[j] as u32).wrapping_sub(128);
                    if d != 0 {
                        axpy(h, d, &a[j * LWE_N..(j + 1) * LWE_N]);
                    }
                }
            }
        }
        out
    }

    /// Rows `range` of the answers to `queries` (`c` query vectors of `cols` u32 each,
    /// concatenated): `out[q·len + (i − start)] = Σ_j (D_ij − 128)·query_q[j]`.
    ///
    /// One pass over the rows for all queries, in column tiles: a tile of every query
    /// ([`TILE`] columns, 64 KiB for 8 queries) stays in cache while each row's tile is read
    /// once and widened once for up to 8 queries ([`dot_u8_x8`]). Sums are mod 2³², so the
    /// order does not change them.
    pub fn answer_rows(&self, queries: &[u32], range: std::ops::Range<usize>) -> Vec<u32> {
        let range = self.local(range);
        let cols = self.shape.cols;
        let c = queries.len() / cols;
        let len = range.len();
        #[cfg(target_arch = "x86_64")]
        {
            if crate::vnni::available() {
                // SAFETY: the CPU supports AVX-512F, BW and VNNI (checked just above).
                let out = unsafe { crate::vnni::raw_sums(self.data(), cols, queries, range) };
                return subtract_offsets(queries, cols, len, out);
            }
        }
        let mut out = vec![0u32; c * len];
        let data = self.data();
        for t0 in (0..cols).step_by(TILE) {
            let t1 = (t0 + TILE).min(cols);
            let tiles: Vec<&[u32]> = queries.chunks_exact(cols).map(|q| &q[t0..t1]).collect();
            for (k, i) in range.clone().enumerate() {
                let row = &data[i * cols + t0..i * cols + t1];
                let mut q = 0;
                for group in tiles.chunks(8) {
                    if let Ok(group) = <&[&[u32]; 8]>::try_from(group) {
                        let sums = dot_u8_x8(row, group);
                        for (j, s) in sums.into_iter().enumerate() {
                            let o = &mut out[(q + j) * len + k];
                            *o = o.wrapping_add(s);
                        }
                    } else {
                        for (j, t) in group.iter().enumerate() {
                            let o = &mut out[(q + j) * len + k];
                            *o = o.wrapping_add(dot_u8(row, t));
                        }
                    }
                    q += group.len();
                }
            }
        }
        subtract_offsets(queries, cols, len, out)
    }

    /// [`Database::answer_rows`] without the AVX-512 VNNI build: the reference it is tested
    /// against.
    #[cfg(test)]
    fn answer_rows_portable(&self, queries: &[u32], range: std::ops::Range<usize>) -> Vec<u32> {
        let range = self.local(range);
        let cols = self.shape.cols;
        let (c, len) = (queries.len() / cols, range.len());
        let mut out = vec![0u32; c * len];
        for (q, query) in queries.chunks_exact(cols).enumerate() {
            for (k, i) in range.clone().enumerate() {
                out[q * len + k] = dot_u8(&self.data()[i * cols..(i + 1) * cols], query);
            }
        }
        subtract_offsets(queries, cols, len, out)
    }
}

// The wire formats below assume these widths.
const _: () = assert!(lwe::HINT_BITS == 20 && LWE_N.is_multiple_of(2));

/// The hint's wire form: each entry of `H` (from [`Database::hint_rows`], in order) rounded to
/// its top [`lwe::HINT_BITS`] bits, two entries in five little-endian bytes. The client reads
/// it with [`decode_hint`]; the rounding is in the correctness bound (`lwe`'s docs).
pub fn encode_hint(values: &[u32]) -> Vec<u8> {
    assert!(
        values.len().is_multiple_of(2),
        "hints have rows × N entries"
    );
    crate::bits::pack(
        values
            .iter()
            .map(|&v| u64::from(lwe::round_top(v, lwe::HINT_BITS))),
        lwe::HINT_BITS,
    )
}

/// The entries [`encode_hint`] wrote, each as the multiple of `2^(32 − HINT_BITS)` it
/// stands for. `None` unless the length is a whole number of pairs.
pub fn decode_hint(bytes: &[u8]) -> Option<Vec<u32>> {
    if !bytes.len().is_multiple_of(5) {
        return None;
    }
    let shift = lwe::LOG_Q - lwe::HINT_BITS;
    // Two entries in five bytes: no bits left over.
    let values = crate::bits::unpack(bytes, bytes.len() / 5 * 2, lwe::HINT_BITS).ok()?;
    Some(values.into_iter().map(|v| (v as u32) << shift).collect())
}

/// The stored entries are `D + 128`: each answer less `128·Σ_j query_j`.
fn subtract_offsets(queries: &[u32], cols: usize, len: usize, mut out: Vec<u32>) -> Vec<u32> {
    for (qv, chunk) in queries
        .chunks_exact(cols)
        .zip(out.chunks_exact_mut(len.max(1)))
    {
        let offset = qv
            .iter()
            .fold(0u32, |s, &v| s.wrapping_add(v))
            .wrapping_mul(128);
        chunk.iter_mut().for_each(|o| *o = o.wrapping_sub(offset));
    }
    out
}

/// Columns of an answer tile ([`Database::answer_rows`]).
const TILE: usize = 2048;

/// `h += d·a` mod 2³².
#[inline]
fn axpy(h: &mut [u32], d: u32, a: &[u32]) {
    for (x, &y) in h.iter_mut().zip(a) {
        *x = x.wrapping_add(d.wrapping_mul(y));
    }
}

/// `Σ row_j·q_j` mod 2³², bytes widened. Dispatches to an AVX2 build of the same loop where
/// the CPU has it (32-bit lane multiplies; plain x86-64 lacks them).
#[inline]
fn dot_u8(row: &[u8], q: &[u32]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { dot_u8_avx2(row, q) };
        }
    }
    dot_u8_portable(row, q)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_u8_avx2(row: &[u8], q: &[u32]) -> u32 {
    dot_u8_portable(row, q)
}

#[inline(always)]
fn dot_u8_portable(row: &[u8], q: &[u32]) -> u32 {
    let mut acc = [0u32; 8];
    let n = row.len() / 8 * 8;
    for (r, v) in row[..n].chunks_exact(8).zip(q[..n].chunks_exact(8)) {
        for k in 0..8 {
            acc[k] = acc[k].wrapping_add((r[k] as u32).wrapping_mul(v[k]));
        }
    }
    let mut s = acc.iter().fold(0u32, |s, &v| s.wrapping_add(v));
    for (r, v) in row[n..].iter().zip(&q[n..]) {
        s = s.wrapping_add((*r as u32).wrapping_mul(*v));
    }
    s
}

/// `Σ row_j·q_j` mod 2³² for 8 queries at once: each byte of `row` widened once for all
/// of them (AVX2 build where the CPU has it, as [`dot_u8`]).
#[inline]
fn dot_u8_x8(row: &[u8], q: &[&[u32]; 8]) -> [u32; 8] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { dot_u8_x8_avx2(row, q) };
        }
    }
    dot_u8_x8_portable(row, q)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_u8_x8_avx2(row: &[u8], q: &[&[u32]; 8]) -> [u32; 8] {
    dot_u8_x8_portable(row, q)
}

#[inline(always)]
fn dot_u8_x8_portable(row: &[u8], q: &[&[u32]; 8]) -> [u32; 8] {
    let n = row.len() / 8 * 8;
    let mut acc = [[0u32; 8]; 8];
    for (c, r) in row[..n].chunks_exact(8).enumerate() {
        let w: [u32; 8] = std::array::from_fn(|k| u32::from(r[k]));
        for (a, qv) in acc.iter_mut().zip(q) {
            let v = &qv[c * 8..c * 8 + 8];
            for k in 0..8 {
                a[k] = a[k].wrapping_add(w[k].wrapping_mul(v[k]));
            }
        }
    }
    std::array::from_fn(|j| {
        let s = acc[j].iter().fold(0u32, |s, &v| s.wrapping_add(v));
        row[n..].iter().zip(&q[j][n..]).fold(s, |s, (&r, &v)| {
            s.wrapping_add(u32::from(r).wrapping_mul(v))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_tile_or_are_refused() {
        let s = Shape::new(784, 10_000, 1568).unwrap();
        assert_eq!((s.cols, s.queries_per_record()), (5000, 1));
        assert_eq!(s.first_column(9_999), 4_999);
        let s = Shape::new(4096, 10, 1024).unwrap();
        assert_eq!(
            (s.cols, s.queries_per_record(), s.first_column(3)),
            (40, 4, 12)
        );
        assert!(Shape::new(784, 10, 1000).is_err());
        assert!(Shape::new(1000, 10, 784).is_err());
        assert!(Shape::new(0, 10, 784).is_err());
        let mut bad = s;
        bad.cols += 1;
        assert!(bad.validate().is_err());
        let huge = Shape {
            record_len: 1,
            records: usize::MAX,
            rows: 1,
            cols: usize::MAX,
        };
        assert!(huge.validate().is_err());
    }

    #[test]
    fn every_answer_build_sums_exactly() {
        // Widths that are and are not whole 64-byte chunks and span several tiles, 1 to 9
        // queries (whole groups and a remainder), extreme entries and query values.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (rows, records, c) in [(8usize, 2_000usize, 1usize), (8, 9_000, 9), (16, 64, 4)] {
            let shape = Shape::new(8, records, rows).unwrap();
            let recs: Vec<Vec<u8>> = (0..records)
                .map(|r| match r % 5 {
                    0 => vec![255; 8],
                    1 => vec![0; 8],
                    _ => (0..8).map(|_| next() as u8).collect(),
                })
                .collect();
            let db = Database::build(shape, recs.iter().map(|r| r.as_slice())).unwrap();
            let queries: Vec<u32> = (0..c * shape.cols)
                .map(|j| match j % 7 {
                    0 => u32::MAX,
                    1 => 0x8080_8080,
                    2 => 0x7f7f_7f7f,
                    3 => 1 << 31,
                    _ => next() as u32,
                })
                .collect();
            for range in [0..shape.rows, 1..shape.rows - 1] {
                assert_eq!(
                    db.answer_rows(&queries, range.clone()),
                    db.answer_rows_portable(&queries, range),
                    "{} columns, {c} queries",
                    shape.cols
                );
            }
        }
    }

    #[test]
    fn records_land_where_extract_reads_them() {
        for (len, rows) in [(3usize, 12usize), (12, 4), (5, 5)] {
            let shape = Shape::new(len, 7, rows).unwrap();
            let recs: Vec<Vec<u8>> = (0..7).map(|r| vec![r as u8 + 1; len]).collect();
            let db = Database::build(shape, recs.iter().map(|r| r.as_slice())).unwrap();
            for (r, rec) in recs.iter().enumerate() {
                let mut cols = Vec::new();
                for c in 0..shape.queries_per_record() {
                    let j = shape.first_column(r) + c;
                    cols.extend((0..rows).map(|i| db.data()[i * shape.cols + j]));
                }
                assert_eq!(shape.extract(r, &cols).unwrap(), &rec[..]);
                // The unit a publisher digests is the columns a client decodes.
                assert_eq!(shape.unit_bytes(shape.unit_of(r), |i| &recs[i]), cols);
            }
            // Every unit, the last one part padding where records do not fill it.
            assert_eq!(shape.units() * shape.queries_per_record(), shape.cols);
            for u in 0..shape.units() {
                let w = shape.queries_per_record();
                let cols: Vec<u8> = (u * w..(u + 1) * w)
                    .flat_map(|j| (0..rows).map(move |i| (i, j)))
                    .map(|(i, j)| db.data()[i * shape.cols + j])
                    .collect();
                assert_eq!(
                    shape.unit_bytes(u, |i| &recs[i]),
                    cols,
                    "unit {u} of {shape:?}"
                );
            }
        }
    }

    #[test]
    fn tiled_answers_equal_row_by_row_dot_products() {
        // Column counts below, at and past a tile; 1, 8 and 11 queries (a group of 8 and a
        // remainder); with the AVX-512 build, 14 rows (two blocks of its 6 and 2 more) over
        // two of its 32,768-column tiles and a tail past whole 64-byte chunks.
        for (rows, cols, c) in [
            (3usize, 5usize, 1usize),
            (4, TILE, 8),
            (5, TILE * 2 + 7, 11),
            (15, 32_768 + 3 * 64 + 5, 3),
        ] {
            let shape = Shape {
                record_len: 1,
                records: rows * cols,
                rows,
                cols,
            };
            let data: Vec<u8> = (0..rows * cols).map(|i| (i * 131 % 251) as u8).collect();
            let db = Database {
                shape,
                first_row: 0,
                data: Held::Owned(data.clone()),
            };
            let queries: Vec<u32> = (0..c * cols)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761))
                .collect();
            let got = db.answer_rows(&queries, 1..rows);
            for q in 0..c {
                for i in 1..rows {
                    let want = (0..cols).fold(0u32, |s, j| {
                        let d = u32::from(data[i * cols + j]).wrapping_sub(128);
                        s.wrapping_add(d.wrapping_mul(queries[q * cols + j]))
                    });
                    assert_eq!(got[q * (rows - 1) + i - 1], want, "{rows}×{cols}, c {c}");
                }
            }
        }
    }

    #[test]
    fn portable_and_dispatched_kernels_agree() {
        let row: Vec<u8> = (0..1001).map(|i| (i * 37 % 256) as u8).collect();
        let q: Vec<u32> = (0..1001u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        assert_eq!(dot_u8(&row, &q), dot_u8_portable(&row, &q));
    }
}
