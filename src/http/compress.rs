//! Compression of the answers a client may want compressed (a session's
//! snapshot, the OpenAPI document, lists): as actix-web's `Compress`
//! does, but only for answers of at least [`MIN_COMPRESSED_BYTES`].
//!
//! Starting an encoder costs the same whatever it then writes: a gzip
//! encoder allocates and clears its window and hash tables, about 500,000
//! instructions, which is more than a whole turn of a session. A session's
//! creation answers about 300 bytes (its id, tokens and links), and
//! compressing them saved nothing and cost that. Smaller answers go as
//! they are; every answer says `Vary: Accept-Encoding`, since a larger one
//! of the same route may be compressed.

use actix_http::encoding::Encoder;
use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, AcceptEncoding, ContentEncoding, Encoding, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage};

/// Answers smaller than this many bytes are sent uncompressed.
pub const MIN_COMPRESSED_BYTES: u64 = 1024;

/// The codings offered, most preferred first when a client accepts several
/// equally.
const OFFERED: [Encoding; 4] = [
    Encoding::Known(ContentEncoding::Brotli),
    Encoding::Known(ContentEncoding::Zstd),
    Encoding::Known(ContentEncoding::Gzip),
    Encoding::Known(ContentEncoding::Deflate),
];

/// The middleware (`actix_web::middleware::from_fn(compress)`).
pub async fn compress(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let accepted = req.get_header::<AcceptEncoding>();
    let res = next.call(req).await?;
    Ok(res.map_body(move |head, body| {
        let coding = coding_for(accepted.as_ref(), body.size());
        // The encoder says it when it compresses.
        if coding == ContentEncoding::Identity {
            head.headers_mut()
                .append(header::VARY, HeaderValue::from_static("accept-encoding"));
        }
        Encoder::response(coding, head, body)
    }))
}

/// The coding an answer of `size` goes out with: the client's preferred
/// one of [`OFFERED`] for an answer of at least [`MIN_COMPRESSED_BYTES`]
/// (or of a size not known in advance), else none. A client that accepts
/// none of them gets the answer uncompressed, which HTTP allows.
fn coding_for(accepted: Option<&AcceptEncoding>, size: BodySize) -> ContentEncoding {
    if matches!(size, BodySize::Sized(n) if n < MIN_COMPRESSED_BYTES) {
        return ContentEncoding::Identity;
    }
    match accepted.and_then(|a| a.negotiate(OFFERED.iter())) {
        Some(Encoding::Known(coding)) => coding,
        _ => ContentEncoding::Identity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::Header;
    use actix_web::test::TestRequest;

    fn accept(value: &str) -> AcceptEncoding {
        let req = TestRequest::default()
            .insert_header((header::ACCEPT_ENCODING, value))
            .to_http_request();
        AcceptEncoding::parse(&req).expect("a valid header")
    }

    #[test]
    fn only_answers_big_enough_are_compressed_with_what_the_client_prefers() {
        let gzip = accept("gzip, deflate");
        let big = BodySize::Sized(MIN_COMPRESSED_BYTES);
        assert_eq!(coding_for(Some(&gzip), big), ContentEncoding::Gzip);
        assert_eq!(
            coding_for(Some(&gzip), BodySize::Sized(MIN_COMPRESSED_BYTES - 1)),
            ContentEncoding::Identity
        );
        // A streamed answer's size is not known: it may be large.
        assert_eq!(
            coding_for(Some(&gzip), BodySize::Stream),
            ContentEncoding::Gzip
        );
        assert_eq!(
            coding_for(Some(&accept("gzip;q=0.5, br")), big),
            ContentEncoding::Brotli
        );
        assert_eq!(coding_for(None, big), ContentEncoding::Identity);
        assert_eq!(
            coding_for(Some(&accept("compress")), big),
            ContentEncoding::Identity
        );
    }
}
