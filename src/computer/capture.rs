//! Turning captured pixels into what a model reads: scaled to fit a maximum size (always the same size
//! for the same screen), an optional cursor mark, and PNG or JPEG.

use std::io::Cursor;

use base64::Engine as _;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::imageops::FilterType as ResizeFilter;
use image::{ImageEncoder, Rgb, RgbImage};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Png,
    Jpeg { quality: u8 },
}

impl Encoding {
    pub fn mime_type(self) -> &'static str {
        match self {
            Encoding::Png => "image/png",
            Encoding::Jpeg { .. } => "image/jpeg",
        }
    }
}

/// The largest size that fits `bounds` with the aspect of `size` (never larger than `size`).
pub fn fitted(size: (u32, u32), bounds: Option<(u32, u32)>) -> (u32, u32) {
    let (width, height) = size;
    let Some((max_width, max_height)) = bounds else {
        return size;
    };
    if width <= max_width && height <= max_height || width == 0 || height == 0 {
        return size;
    }
    let scale = f64::min(
        f64::from(max_width) / f64::from(width),
        f64::from(max_height) / f64::from(height),
    );
    let scaled = |side: u32| ((f64::from(side) * scale).round() as u32).max(1);
    (scaled(width), scaled(height))
}

pub fn resize(image: RgbImage, size: (u32, u32)) -> RgbImage {
    if image.dimensions() == size {
        return image;
    }
    image::imageops::resize(&image, size.0, size.1, ResizeFilter::Triangle)
}

/// A crosshair at (x, y), black with a white outline, so it shows on any background.
pub fn draw_cursor(image: &mut RgbImage, x: i64, y: i64) {
    const ARM: i64 = 8;
    let (width, height) = (i64::from(image.width()), i64::from(image.height()));
    let mut put = |px: i64, py: i64, colour: [u8; 3]| {
        if (0..width).contains(&px) && (0..height).contains(&py) {
            image.put_pixel(px as u32, py as u32, Rgb(colour));
        }
    };
    for offset in -ARM..=ARM {
        for side in [-1, 1] {
            put(x + offset, y + side, [255, 255, 255]);
            put(x + side, y + offset, [255, 255, 255]);
        }
    }
    for offset in -ARM..=ARM {
        put(x + offset, y, [0, 0, 0]);
        put(x, y + offset, [0, 0, 0]);
    }
}

/// The image, encoded and in base64, as an MCP image item carries it.
pub fn encode_base64(image: &RgbImage, encoding: Encoding) -> Result<String, String> {
    let mut bytes = Vec::with_capacity(image.as_raw().len() / 4);
    let (width, height) = image.dimensions();
    let written = match encoding {
        // Fast compression: a screenshot is read once, by a model; deflate's best levels cost
        // several times the capture for a few percent.
        Encoding::Png => PngEncoder::new_with_quality(
            Cursor::new(&mut bytes),
            CompressionType::Fast,
            FilterType::Adaptive,
        )
        .write_image(
            image.as_raw(),
            width,
            height,
            image::ExtendedColorType::Rgb8,
        ),
        Encoding::Jpeg { quality } => {
            JpegEncoder::new_with_quality(Cursor::new(&mut bytes), quality).write_image(
                image.as_raw(),
                width,
                height,
                image::ExtendedColorType::Rgb8,
            )
        }
    };
    written.map_err(|err| format!("cannot encode the screenshot: {err}"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fitting_keeps_the_aspect_and_never_enlarges() {
        assert_eq!(fitted((2560, 1600), Some((1280, 800))), (1280, 800));
        assert_eq!(fitted((2560, 1440), Some((1280, 800))), (1280, 720));
        assert_eq!(fitted((1024, 768), Some((1280, 800))), (1024, 768));
        assert_eq!(fitted((1280, 800), None), (1280, 800));
    }

    #[test]
    fn png_round_trips_exact_pixels() {
        let mut image = RgbImage::new(4, 2);
        image.put_pixel(1, 1, Rgb([10, 200, 30]));
        let encoded = encode_base64(&image, Encoding::Png).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        let decoded = image::load_from_memory(&bytes).unwrap().to_rgb8();
        assert_eq!(decoded, image);
    }
}
