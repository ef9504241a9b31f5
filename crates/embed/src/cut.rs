//! Is the garment cut off by the photo's edge? A garment partly outside the photo is framed
//! from the part that is in it, so its model input — and its nearest neighbours — are those
//! of another, smaller shape (`eval --photos`: a 10–15 % crop kept 0.16–0.40 of the top 8).
//! Nothing can bring the missing part back; the person can, by taking the photo again.

/// What a person is told when [`cut_off`] says so (issue 61's words).
pub const CUT_OFF_MESSAGE: &str = "The item is cut off — include all of it for the best matches.";

/// Whether the object's box `(x0, y0, x1, y1)` (end exclusive, as `photo::Framing::bbox`) in
/// a `width × height` photo is cut off by the photo's edge: it touches an edge, and does not
/// span the photo along either axis. Why the exception: a photo framed tightly on the garment,
/// as the dataset's own images are (the longest side from edge to edge), touches two opposite
/// edges and is whole; a garment cut by one edge touches it and leaves a margin on the
/// opposite side. A box spans an axis when it comes within [`SPAN_SLACK`] of both its edges:
/// a garment's outermost row can be fainter than the box's floor (`photo::PHOTO_MASK_FLOOR`),
/// so a tightly framed garment's box can stop a pixel or a few short of one edge. The whole
/// photo (nothing found) spans both axes: not cut.
pub fn cut_off(bbox: (usize, usize, usize, usize), width: usize, height: usize) -> bool {
    let (x0, y0, x1, y1) = bbox;
    let slack = width.max(height).div_ceil(SPAN_SLACK);
    let touches = x0 == 0 || y0 == 0 || x1 >= width || y1 >= height;
    let spans = (x0 <= slack && x1 + slack >= width) || (y0 <= slack && y1 + slack >= height);
    touches && !spans
}

/// A box within the photo's longest side over this many pixels of both edges of an axis spans
/// it (one model pixel of a garment framed tightly: 4 photo pixels at 112).
pub const SPAN_SLACK: usize = crate::weights::SIDE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_edge_is_cut_two_opposite_are_framed() {
        // Inside with a margin: whole.
        assert!(!cut_off((10, 10, 90, 90), 100, 100));
        // Cut by one edge, or two adjacent ones (a corner): cut off.
        assert!(cut_off((0, 10, 90, 90), 100, 100));
        assert!(cut_off((10, 10, 100, 90), 100, 100));
        assert!(cut_off((10, 0, 100, 90), 100, 100));
        // Framed tightly along one axis (the dataset's way), with or without a margin across.
        assert!(!cut_off((20, 0, 80, 100), 100, 100));
        assert!(!cut_off((0, 20, 100, 80), 100, 100));
        assert!(!cut_off((0, 0, 90, 100), 100, 100));
        // A faint outermost row left out of the box: still framed tightly (slack 4 at 100).
        assert!(!cut_off((20, 3, 80, 100), 100, 100));
        assert!(cut_off((20, 5, 80, 100), 100, 100));
        // Nothing found: the whole photo.
        assert!(!cut_off((0, 0, 100, 100), 100, 100));
    }
}
