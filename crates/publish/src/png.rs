//! Greyscale gallery images as PNG: what the REST API serves as `image.png` and
//! `thumbnail_png_base64`, and the page's sample images (`web/samples.js`).

use base64::Engine;

/// Encode a `width`×`height` greyscale image as PNG.
pub fn png_grey(pixels: &[u8], width: u32, height: u32) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(png::ColorType::Grayscale);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header()?;
        writer.write_image_data(pixels)?;
    }
    Ok(out)
}

pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_a_valid_png() {
        let px: Vec<u8> = (0..28 * 28).map(|i| (i % 256) as u8).collect();
        let bytes = png_grey(&px, 28, 28).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (28, 28));
        assert_eq!(&buf[..info.buffer_size()], &px[..]);
    }
}
