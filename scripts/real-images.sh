#!/usr/bin/env bash
# Real images that are not clothing, for `eval --real-images DIR` (eval/src/photos/real.rs):
# photographs, faces and drawn objects from Debian's packages and scikit-image's wheel, one
# folder a kind. Nothing is committed and nothing here runs in CI.
#
#   bash scripts/real-images.sh /tmp/real-images
#   bash scripts/eval.sh --real-images /tmp/real-images --out /tmp/real-eval
#
# Kinds, one folder each:
# - icon-<category>: Debian's oxygen-icon-theme at 256×256 (devices, places, applications,
#   documents…): drawn objects on a transparent ground, which the client puts on white;
# - wallpaper: Debian's gnome-backgrounds;
# - sample: scikit-image's sample images (photographs of people, animals and objects, a page
#   of text, microscopy, the sky, a few test patterns);
# - face and patch: scikit-image's LFW subset, 100 faces and 100 other patches of the same
#   photographs, 25×25, enlarged to 100×100 (the client refuses images under 28 pixels);
# - emoji: Noto Color Emoji's single-character emoji, 136×128 (faces, animals, food,
#   objects, places, symbols);
# - emoji-clothing, kept apart: its emoji of the gallery's ten kinds (T-shirt, jeans, shorts,
#   dress, coat, lab coat, kimono, sari, vest, bags, briefcase, shoes, sandals, boots), drawn
#   clothing, which the warning should not flag. Other things worn (hats, gloves, socks,
#   scarves, swimwear, glasses, a tie) and luggage are in neither.
set -euo pipefail
out=${1:?usage: real-images.sh DIR}
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
step() { echo "real-images: $1 (about $2)…" >&2; }

missing=()
[ -d /usr/share/icons/oxygen/base/256x256 ] || missing+=(oxygen-icon-theme)
[ -d /usr/share/backgrounds/gnome ] || missing+=(gnome-backgrounds)
emoji=/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf
[ -f $emoji ] || missing+=(fonts-noto-color-emoji)
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]} with apt" "1 minute"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step "fetching scikit-image's wheel (its sample data only; nothing is installed)" "30 seconds"
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "scikit-image==0.26.0"
python3 -c "import PIL, numpy, fontTools" 2>/dev/null || {
  step "installing Pillow, NumPy and fontTools for the conversion" "30 seconds"
  python3 -m pip install --quiet --user pillow numpy fonttools
}
step "writing the images to $out" "30 seconds"
python3 - "$work" "$out" "$emoji" <<'PY'
import glob, os, shutil, sys, zipfile
import numpy as np
from fontTools.ttLib import TTFont
from PIL import Image

work, out, emoji = sys.argv[1], sys.argv[2], sys.argv[3]
def folder(kind):
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    return d

n = 0
for p in sorted(glob.glob("/usr/share/icons/oxygen/base/256x256/*/*.png")):
    category = os.path.basename(os.path.dirname(p))
    shutil.copy(p, folder("icon-" + category))
    n += 1
for p in sorted(glob.glob("/usr/share/backgrounds/gnome/*")):
    if p.endswith((".jpg", ".jpeg", ".png", ".webp")):
        name = os.path.splitext(os.path.basename(p))[0] + ".png"
        Image.open(p).convert("RGB").save(os.path.join(folder("wallpaper"), name))
        n += 1
wheel = glob.glob(os.path.join(work, "scikit_image-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    for name in sorted(z.namelist()):
        base = os.path.basename(name)
        if not name.startswith("skimage/data/"):
            continue
        if base.endswith((".png", ".jpg")):
            with open(os.path.join(folder("sample"), base), "wb") as f:
                f.write(z.read(name))
            n += 1
        elif base == "lfw_subset.npy":
            with open(os.path.join(work, base), "wb") as f:
                f.write(z.read(name))
lfw = np.load(os.path.join(work, "lfw_subset.npy"))
for i, a in enumerate(lfw):
    kind = "face" if i < 100 else "patch"
    img = Image.fromarray((a * 255).round().astype(np.uint8)).resize((100, 100), Image.BICUBIC)
    img.save(os.path.join(folder(kind), f"lfw{i:03}.png"))
    n += 1

# The gallery's kinds among the emoji, and other things worn (neither set).
GALLERY_KINDS = {
    0x1F455, 0x1F456, 0x1F457, 0x1F458, 0x1F97B, 0x1F97C, 0x1F9E5, 0x1F3BD, 0x1F9BA,
    0x1FA73, 0x1F45B, 0x1F45C, 0x1F45D, 0x1F6CD, 0x1F392, 0x1F45E, 0x1F45F, 0x1F460,
    0x1F461, 0x1F462, 0x1F97E, 0x1F97F, 0x1FA70, 0x1FA74, 0x1F4BC,
}
OTHER_WORN = {
    0x1F393, 0x1F3A9, 0x1F452, 0x1F451, 0x1F9E2, 0x26D1, 0x1FA96, 0x1F459, 0x1FA71, 0x1FA72,
    0x1F9E3, 0x1F9E4, 0x1F9E6, 0x1F453, 0x1F576, 0x1F97D, 0x1F48D, 0x1F4FF, 0x1F454, 0x1FA7B,
    0x1FA7C, 0x1FAAD, 0x1FAAE, 0x1F94B, 0x1F9F3,
}
font = TTFont(emoji)
glyph_to_char = {}
for cp, glyph in font.getBestCmap().items():
    glyph_to_char.setdefault(glyph, cp)
for glyph, bitmap in font["CBDT"].strikeData[0].items():
    cp = glyph_to_char.get(glyph)
    if cp is None or cp in OTHER_WORN:
        continue  # sequences (skin tones, families, flags) have no single character
    kind = "emoji-clothing" if cp in GALLERY_KINDS else "emoji"
    with open(os.path.join(folder(kind), f"{cp:05X}.png"), "wb") as f:
        f.write(bitmap.imageData)
    n += 1
print(f"real-images: {n} images in {out}", file=sys.stderr)
PY
