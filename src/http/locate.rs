//! Finding a session from HTTP: here (loaded from storage if needed) or on
//! the node that runs it ([`Routed`]), and the one way a handler sends it a
//! message ([`send_to_session`]).

use std::time::Duration;

use super::errors::{hub_failed, no_session, overloaded, session_refused};
use super::peers::{Owner, Routed};
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::ids::{SessionId, TraceId};
use crate::session::{
    CallTool, ChatRefused, DirectCallDone, HubError, Lookup, SessionActor, SessionHandle,
};

/// Longest a service waits for its call to get through a busy session's
/// queue; the call still runs after that, and its audit row tells.
pub const SESSION_WAIT: Duration = Duration::from_secs(30);
/// What the caller of a direct call is told when the session stayed busy
/// for [`SESSION_WAIT`] (`408 TIMEOUT`): the call is still queued and runs
/// when the work ahead of it is done, its audit row under `trace_id`. A
/// queued call is not stored (docs/protocol.md §4): if the node stops
/// first it is gone, so the ledger says whether to send it again.
pub fn still_queued(trace_id: &TraceId) -> String {
    format!(
        "the session was busy for {} s; the call is still queued and will run once the work \
         ahead of it is done, unless this node stops first (a queued call is not stored): \
         its audit row will carry trace id {trace_id}; without one, send the call again",
        SESSION_WAIT.as_secs(),
    )
}

/// Lookups of a session tried when it stops between a lookup and its use.
const SESSION_LOOKUPS: usize = 3;

/// The live session, loaded from storage if needed, or the node that runs
/// it (several nodes on PostgreSQL); 404 if unknown. If the node that runs
/// it does not answer (dead, or paused), this waits for its lease to run
/// out and runs the session here instead.
pub async fn locate(state: &AppState, id: &SessionId) -> Result<Routed<SessionHandle>, ApiError> {
    let lease = state.store.node().lease;
    let deadline = std::time::Instant::now() + lease * 2 + std::time::Duration::from_secs(1);
    loop {
        let found = state
            .hub
            .send(Lookup {
                session_id: id.clone(),
            })
            .await?;
        match found {
            Ok(Some(handle)) => return Ok(Routed::Here(handle)),
            Ok(None) => return Err(ApiError::not_found(no_session(id.as_str()))),
            Err(HubError::Elsewhere) => {}
            Err(e) => return Err(hub_failed(e)),
        }
        let owner = state
            .store
            .owner_address(id)
            .await
            .map_err(|e| ApiError::internal(&e))?;
        if let Some((node, url)) = owner
            && state.cluster.answers(&url, &node).await
        {
            return Ok(Routed::Owner(Owner {
                url,
                session_id: id.clone(),
            }));
        }
        if std::time::Instant::now() >= deadline {
            return Err(overloaded(
                "the session's node does not answer; try again shortly",
            ));
        }
        // Its node is gone or paused: once its lease runs out, the next
        // lookup claims the session here.
        actix_web::rt::time::sleep(lease / 6).await;
    }
}

/// The one way from HTTP into a session: finds it (loading it if needed),
/// lets `authorize` judge the caller by the live session (its meta and
/// seats), and sends what `make` builds from what `authorize` answered. A session that stops between the lookup and the send (unloading,
/// reloading after a failure) is looked up again, up to
/// [`SESSION_LOOKUPS`] times. A refusal is the session's answer as HTTP; a
/// session another node runs is that node ([`Routed::Owner`]), for the
/// caller to hand the request to.
pub async fn send_to_session<A, M, T>(
    state: &AppState,
    session_id: &SessionId,
    authorize: impl Fn(&SessionHandle) -> Result<A, ApiError>,
    make: impl Fn(A) -> M,
) -> Result<Routed<(SessionHandle, T)>, ApiError>
where
    M: actix::Message<Result = Result<T, ChatRefused>> + Send + 'static,
    T: Send + 'static,
    SessionActor: actix::Handler<M>,
{
    // The last session's word on why it took nothing: reloading, or the
    // node restarting (`503`).
    let mut going = ChatRefused::reloading();
    for _ in 0..SESSION_LOOKUPS {
        let handle = match locate(state, session_id).await? {
            Routed::Here(handle) => handle,
            Routed::Owner(owner) => return Ok(Routed::Owner(owner)),
        };
        let who = authorize(&handle)?;
        match handle.addr.send(make(who)).await {
            Ok(Ok(answer)) => return Ok(Routed::Here((handle, answer))),
            Ok(Err(refused)) if !refused.is_reloading() => return Err(session_refused(refused)),
            Ok(Err(refused)) => going = refused,
            // Gone between the lookup and the send.
            Err(_) => {}
        }
    }
    Err(session_refused(going))
}

/// [`send_to_session`] for a person's direct call ([`CallTool`]: a timer's
/// cancel, an NPC's activation), bounded as the tool API's calls are. A
/// direct call waits in the session's queue behind the running turn, and a
/// turn paused for a person's approval (docs/protocol.md §19) may hold it
/// for as long as the approval's timeout: past [`SESSION_WAIT`] the answer
/// is `408 TIMEOUT` ([`still_queued`]), and the call stays queued and runs
/// once the turn ends, its audit row under `trace_id`.
pub async fn call_in_session<A>(
    state: &AppState,
    session_id: &SessionId,
    trace_id: &TraceId,
    authorize: impl Fn(&SessionHandle) -> Result<A, ApiError>,
    make: impl Fn(A) -> CallTool,
) -> Result<Routed<(SessionHandle, DirectCallDone)>, ApiError> {
    let call = send_to_session(state, session_id, authorize, make);
    match actix_web::rt::time::timeout(SESSION_WAIT, call).await {
        Ok(answer) => answer,
        Err(_) => Err(ApiError::new(ErrorCode::Timeout, still_queued(trace_id))),
    }
}
