//! A model call's events as a session reads them: the ones ready at once
//! (a model that answers at once, [`crate::llm::Provider::answers_at_once`],
//! is read to its end in the same step, so a whole turn's frames reach the
//! journal together), and the rest as a stream of [`ModelMsg`]s tagged with
//! the call, ending with `None`.

use actix::Message;
use futures_util::stream::{self, BoxStream};
use futures_util::{FutureExt, Stream, StreamExt};

use crate::llm::{LlmError, ModelEvent};

/// One event of a model call; `None` marks the end of its stream.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct ModelMsg {
    /// The model call it belongs to.
    pub(super) tag: u64,
    pub(super) event: Option<Result<ModelEvent, LlmError>>,
}

/// A model call's events.
pub(super) type Events = BoxStream<'static, Result<ModelEvent, LlmError>>;

/// The next event if it is there already; `None` if it is not (the rest
/// streams). A stream that ended answers `Some(None)`.
pub(super) fn ready(events: &mut Events) -> Option<Option<Result<ModelEvent, LlmError>>> {
    events.next().now_or_never()
}

/// The rest of the call tagged `tag`, as messages, the last one `None`.
pub(super) fn messages(tag: u64, events: Events) -> impl Stream<Item = ModelMsg> {
    events
        .map(move |e| ModelMsg {
            tag,
            event: Some(e),
        })
        .chain(stream::once(async move { ModelMsg { tag, event: None } }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ModelReply;

    #[actix_web::test]
    async fn an_answer_there_at_once_is_read_at_once_and_the_rest_streams_tagged() {
        let reply = || Ok(ModelEvent::Done(ModelReply::narrate("done")));
        let mut events: Events = stream::iter([reply()]).boxed();
        assert!(matches!(
            ready(&mut events),
            Some(Some(Ok(ModelEvent::Done(_))))
        ));
        assert!(matches!(ready(&mut events), Some(None)), "then its end");

        let mut pending: Events = stream::pending().boxed();
        assert!(ready(&mut pending).is_none(), "nothing there yet");

        let events: Events = stream::iter([reply()]).boxed();
        let got: Vec<(u64, bool)> = messages(3, events)
            .map(|m| (m.tag, m.event.is_some()))
            .collect()
            .await;
        assert_eq!(got, [(3, true), (3, false)], "tagged, and ended with None");
    }
}
