//! WebSocket upgrades, below actix-web: actix-http hands every request
//! that asks for `Upgrade: websocket` here, with the connection's socket.
//! The request goes through the same application (middleware, routing,
//! the route's checks) as any other; a route that accepts the upgrade
//! answers `101` with a [`Plan`] ([`accept`]), and this service writes the
//! `101` and starts the plan's connection actor on the socket itself
//! (`websocket`): the socket leaves actix-http's dispatcher and its
//! buffers. Any other answer (a refusal, or a route that is not a
//! WebSocket) is written as it is and the connection closed.
//!
//! The service's future lasts as long as the WebSocket, so the HTTP
//! connection it came from (its place in the worker's and the node's
//! counts) lasts as long too.

use std::rc::Rc;

use actix_codec::{Encoder, Framed};
use actix_http::body::{BodySize, MessageBody};
use actix_http::h1::{Codec, Message};
use actix_http::{ConnectionType, Request};
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::websocket::Upgraded;
use crate::error::ApiError;

/// Largest answer body written to a refused upgrade.
const MAX_REFUSAL_BYTES: usize = 64 * 1024;

/// Marks a request that came through this service.
#[derive(Clone, Copy)]
struct Upgrading;

/// What a route that accepts an upgrade starts on the socket.
pub struct Plan(Box<dyn FnOnce(Upgraded)>);

/// The `101` answer to a WebSocket handshake, with what to start on the
/// socket once it is written; `400` when `req` is not a WebSocket
/// handshake.
pub fn accept(
    req: &HttpRequest,
    start: impl FnOnce(Upgraded) + 'static,
) -> Result<HttpResponse, ApiError> {
    let mut handshake = actix_http::ws::handshake(req.head())
        .map_err(|e| ApiError::bad_request(format!("websocket upgrade failed: {e}")))?;
    if req.extensions().get::<Upgrading>().is_none() {
        return Err(ApiError::bad_request(
            "websocket upgrade failed: the Upgrade header must be `websocket` alone",
        ));
    }
    let mut res = HttpResponse::from(handshake.finish().map_into_boxed_body());
    res.extensions_mut().insert(Plan(Box::new(start)));
    Ok(res)
}

/// Serves one upgrade request with `app`, the application's service.
///
/// The answer is worked out on the heap and freed once the WebSocket
/// starts: actix-http keeps this future for the WebSocket's whole life, and
/// its size is that of its largest state, so what it keeps meanwhile is a
/// receiver.
pub fn serve<S, B>(
    app: Rc<S>,
    req: Request,
    framed: Framed<TcpStream, Codec>,
) -> impl Future<Output = Result<(), actix_web::Error>>
where
    S: Service<Request, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    let answering = Box::pin(answer(app, req, framed));
    async move {
        if let Some(ended) = answering.await? {
            // Resolves when the connection's actor drops its socket.
            let _ = ended.await;
        }
        Ok(())
    }
}

/// Answers one upgrade request with `app`: starts the WebSocket and
/// answers what tells when it ends, or writes the refusal and answers
/// `None`.
async fn answer<S, B>(
    app: Rc<S>,
    req: Request,
    framed: Framed<TcpStream, Codec>,
) -> Result<Option<oneshot::Receiver<()>>, actix_web::Error>
where
    S: Service<Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    req.extensions_mut().insert(Upgrading);
    let answered = app.call(req).await;
    let mut res = match answered {
        Ok(res) => res.into_parts().1.map_into_boxed_body(),
        Err(e) => HttpResponse::from_error(e),
    };
    let plan = res.extensions_mut().remove::<Plan>();
    let mut parts = framed.into_parts();
    let res: actix_http::Response<_> = res.into();
    match plan {
        Some(Plan(start)) if res.status() == StatusCode::SWITCHING_PROTOCOLS => {
            let (head, _) = res.into_parts();
            parts
                .codec
                .encode(Message::Item((head, BodySize::None)), &mut parts.write_buf)?;
            parts.io.write_all(&parts.write_buf).await?;
            // Nothing of the HTTP connection is kept for the WebSocket's
            // life but its place in the counts.
            drop(parts.write_buf);
            drop(parts.codec);
            let (done, ended) = oneshot::channel();
            start(Upgraded {
                io: parts.io,
                read: parts.read_buf,
                done,
            });
            Ok(Some(ended))
        }
        _ => {
            let (mut head, body) = res.into_parts();
            head.head_mut().set_connection_type(ConnectionType::Close);
            let body = actix_http::body::to_bytes_limited(body, MAX_REFUSAL_BYTES)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            let size = BodySize::Sized(body.len() as u64);
            parts
                .codec
                .encode(Message::Item((head, size)), &mut parts.write_buf)?;
            parts
                .codec
                .encode(Message::Chunk(Some(body)), &mut parts.write_buf)?;
            parts
                .codec
                .encode(Message::Chunk(None), &mut parts.write_buf)?;
            parts.io.write_all(&parts.write_buf).await?;
            let _ = parts.io.shutdown().await;
            Ok(None)
        }
    }
}
