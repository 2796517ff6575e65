//! Screenshots scaled to fit a size a model reads well, and the coordinates that follow: after a scaled
//! screenshot, the points a caller sends (and the element list) are in its pixels, as in the `computer`
//! family, until a screenshot at full size.

use std::io::Cursor;

use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::imageops::FilterType as ResizeFilter;
use image::{ImageEncoder, ImageFormat};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    /// The device's screen in pixels, as `screencap` shows it (in its current orientation).
    pub screen: (u32, u32),
    /// The screenshot the caller saw.
    pub image: (u32, u32),
}

impl Geometry {
    fn map(point: (i64, i64), from: (u32, u32), to: (u32, u32)) -> (i64, i64) {
        let axis = |value: i64, from: u32, to: u32| {
            (value as f64 * f64::from(to) / f64::from(from.max(1))).round() as i64
        };
        (axis(point.0, from.0, to.0), axis(point.1, from.1, to.1))
    }

    /// The caller's (screenshot) pixels to the device's.
    pub fn to_device(self, point: (i64, i64)) -> (i64, i64) {
        Self::map(point, self.image, self.screen)
    }

    /// The device's pixels to the caller's.
    pub fn to_image(self, point: (i64, i64)) -> (i64, i64) {
        Self::map(point, self.screen, self.image)
    }

    /// How many device pixels one screenshot pixel is.
    pub fn factor(self) -> f64 {
        f64::from(self.screen.0) / f64::from(self.image.0.max(1))
    }
}

/// Width and height from a PNG's header (no decoding).
pub fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.get(12..16)? != b"IHDR" {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        Some(u32::from_be_bytes(png.get(range)?.try_into().ok()?))
    };
    Some((number(16..20)?, number(20..24)?))
}

/// The size with the longest side at most `max_side`, aspect kept (never larger than `size`).
pub fn fitted(size: (u32, u32), max_side: u32) -> (u32, u32) {
    let longest = size.0.max(size.1);
    if longest <= max_side || longest == 0 {
        return size;
    }
    let scale = f64::from(max_side) / f64::from(longest);
    let side = |value: u32| ((f64::from(value) * scale).round() as u32).clamp(1, max_side);
    (side(size.0), side(size.1))
}

/// The PNG scaled to `size`, as a PNG again (fast compression: it is read once, by a model).
pub fn scale_png(png: &[u8], size: (u32, u32)) -> Result<Vec<u8>, String> {
    let image = image::load_from_memory_with_format(png, ImageFormat::Png)
        .map_err(|err| format!("the screenshot is no PNG this server can read: {err}"))?
        .into_rgb8();
    let scaled = image::imageops::resize(&image, size.0, size.1, ResizeFilter::Triangle);
    let mut bytes = Vec::new();
    PngEncoder::new_with_quality(
        Cursor::new(&mut bytes),
        CompressionType::Fast,
        FilterType::Adaptive,
    )
    .write_image(
        scaled.as_raw(),
        size.0,
        size.1,
        image::ExtendedColorType::Rgb8,
    )
    .map_err(|err| format!("encoding the scaled screenshot failed: {err}"))?;
    Ok(bytes)
}

/// `wm size`: `Physical size: WxH`, with an `Override size: WxH` line winning when present.
pub fn parse_wm_size(output: &str) -> Option<(u32, u32)> {
    let size_after = |label: &str| {
        output.lines().find_map(|line| {
            let rest = line.trim().strip_prefix(label)?;
            let (width, height) = rest.trim().split_once('x')?;
            Some((width.trim().parse().ok()?, height.trim().parse().ok()?))
        })
    };
    size_after("Override size:").or_else(|| size_after("Physical size:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_the_longest_side_and_maps_both_ways() {
        assert_eq!(fitted((1080, 1920), 1024), (576, 1024));
        assert_eq!(fitted((1920, 1080), 1024), (1024, 576));
        assert_eq!(fitted((500, 800), 1024), (500, 800));
        let geometry = Geometry {
            screen: (1080, 1920),
            image: (576, 1024),
        };
        assert_eq!(geometry.to_device((288, 512)), (540, 960));
        assert_eq!(geometry.to_image((1080, 1920)), (576, 1024));
        assert!((geometry.factor() - 1.875).abs() < 1e-9);
    }

    #[test]
    fn a_png_is_scaled_and_its_size_read() {
        let image = image::RgbImage::from_pixel(300, 600, image::Rgb([10, 200, 30]));
        let mut png = Vec::new();
        image
            .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        assert_eq!(png_size(&png), Some((300, 600)));
        let scaled = scale_png(&png, fitted((300, 600), 100)).unwrap();
        assert_eq!(png_size(&scaled), Some((50, 100)));
        assert_eq!(png_size(b"not a png at all, no header"), None);
    }

    #[test]
    fn wm_size_override_wins() {
        assert_eq!(
            parse_wm_size("Physical size: 1080x1920\n"),
            Some((1080, 1920))
        );
        assert_eq!(
            parse_wm_size("Physical size: 1080x1920\nOverride size: 720x1280\n"),
            Some((720, 1280))
        );
        assert_eq!(parse_wm_size("nothing"), None);
    }
}
