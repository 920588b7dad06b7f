//! A second model for when the first fails (contract §12).
//!
//! [`WithFallback`] asks its primary model first. When that call fails
//! (after the primary's own retries, or at once while its circuit breaker
//! is open), the same request goes to the fallback, and the reply says so
//! ([`ModelReply::fell_back`]); the turn then asks the fallback for the
//! rest of its calls ([`ModelRequest::fallback`]). Text the primary
//! streamed before it failed was journalled already and stays; the
//! fallback's answer follows it.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};

use super::{LlmError, ModelEvent, ModelRequest, Provider, ask};

/// A primary model and the one that answers when it fails.
pub struct WithFallback {
    primary: Arc<dyn Provider>,
    fallback: Arc<dyn Provider>,
}

impl WithFallback {
    pub fn new(primary: Arc<dyn Provider>, fallback: Arc<dyn Provider>) -> Self {
        Self { primary, fallback }
    }
}

/// Where a call with a fallback stands.
enum State {
    /// Reading the primary's answer; the request is kept for the fallback.
    Primary {
        events: BoxStream<'static, Result<ModelEvent, LlmError>>,
        fallback: Arc<dyn Provider>,
        request: ModelRequest,
    },
    /// Reading the fallback's answer.
    Fallback(BoxStream<'static, Result<ModelEvent, LlmError>>),
}

/// The fallback's answer to `request`, its reply marked as the fallback's.
fn on_fallback(
    fallback: &dyn Provider,
    request: ModelRequest,
) -> BoxStream<'static, Result<ModelEvent, LlmError>> {
    ask(fallback, request)
        .map(|event| {
            event.map(|e| match e {
                ModelEvent::Done(mut reply) => {
                    reply.fell_back = true;
                    ModelEvent::Done(reply)
                }
                delta => delta,
            })
        })
        .boxed()
}

impl Provider for WithFallback {
    fn name(&self) -> &str {
        self.primary.name()
    }

    fn model(&self) -> &str {
        self.primary.model()
    }

    fn budgeted(&self) -> bool {
        self.primary.budgeted() || self.fallback.budgeted()
    }

    fn writes_content(&self) -> bool {
        self.primary.writes_content()
    }

    fn reads_conversation(&self) -> bool {
        self.primary.reads_conversation() || self.fallback.reads_conversation()
    }

    fn complete(&self, request: ModelRequest) -> BoxStream<'static, Result<ModelEvent, LlmError>> {
        if request.fallback {
            return on_fallback(&*self.fallback, request);
        }
        let state = State::Primary {
            events: ask(&*self.primary, request.clone()),
            fallback: self.fallback.clone(),
            request,
        };
        stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            loop {
                match state {
                    State::Primary {
                        mut events,
                        fallback,
                        request,
                    } => match events.next().await {
                        Some(Err(error)) => {
                            tracing::warn!(%error, "the model failed; the fallback model answers the rest of the turn");
                            state = State::Fallback(on_fallback(&*fallback, request));
                        }
                        Some(Ok(event)) => {
                            let next = match event {
                                ModelEvent::Done(_) => None,
                                ModelEvent::Delta(_) => Some(State::Primary {
                                    events,
                                    fallback,
                                    request,
                                }),
                            };
                            return Some((Ok(event), next));
                        }
                        None => return None,
                    },
                    State::Fallback(mut events) => {
                        let event = events.next().await?;
                        return Some((event, Some(State::Fallback(events))));
                    }
                }
            }
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ModelReply, RequestKind, collect_reply};

    /// A model that streams `deltas`, then answers `reply` or fails.
    struct Canned {
        model: &'static str,
        deltas: Vec<&'static str>,
        reply: Result<&'static str, LlmError>,
    }

    impl Provider for Canned {
        fn name(&self) -> &str {
            "canned"
        }

        fn model(&self) -> &str {
            self.model
        }

        fn complete(&self, _: ModelRequest) -> BoxStream<'static, Result<ModelEvent, LlmError>> {
            let mut events: Vec<Result<ModelEvent, LlmError>> = self
                .deltas
                .iter()
                .map(|d| Ok(ModelEvent::Delta((*d).to_owned())))
                .collect();
            events.push(
                self.reply
                    .clone()
                    .map(|text| ModelEvent::Done(ModelReply::narrate(text))),
            );
            stream::iter(events).boxed()
        }
    }

    fn canned(
        model: &'static str,
        deltas: Vec<&'static str>,
        reply: Result<&'static str, LlmError>,
    ) -> Arc<dyn Provider> {
        Arc::new(Canned {
            model,
            deltas,
            reply,
        })
    }

    fn request(fallback: bool) -> ModelRequest {
        let mut r = ModelRequest::build(
            "system".into(),
            Vec::new(),
            0,
            Arc::default(),
            Arc::default(),
            RequestKind::Step,
        );
        r.fallback = fallback;
        r
    }

    async fn events(provider: &dyn Provider, fallback: bool) -> Vec<Result<ModelEvent, LlmError>> {
        ask(provider, request(fallback)).collect().await
    }

    #[actix_web::test]
    async fn the_primary_answers_while_it_works_and_the_fallback_once_it_fails() {
        let down = || Err(LlmError::Upstream("503".into()));
        let ok = WithFallback::new(
            canned("big", vec!["Hi. "], Ok("Hi. There.")),
            canned("small", vec![], Ok("Small.")),
        );
        let reply = collect_reply(ask(&ok, request(false))).await.unwrap();
        assert_eq!(reply.text, "Hi. There.");
        assert_eq!(reply.model.as_deref(), Some("big"));
        assert!(!reply.fell_back);

        // The primary fails after streaming some text: that text came out,
        // then the fallback's whole answer, marked as the fallback's.
        let failing = WithFallback::new(
            canned("big", vec!["Hi. "], down()),
            canned("small", vec!["Sm"], Ok("Small.")),
        );
        let got = events(&failing, false).await;
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(matches!(&got[0], Ok(ModelEvent::Delta(d)) if d == "Hi. "));
        assert!(matches!(&got[1], Ok(ModelEvent::Delta(d)) if d == "Sm"));
        let Ok(ModelEvent::Done(reply)) = &got[2] else {
            panic!("{got:?}")
        };
        assert_eq!(reply.text, "Small.");
        assert_eq!(reply.model.as_deref(), Some("small"));
        assert!(reply.fell_back);

        // A turn that fell back asks the fallback straight away.
        let reply = collect_reply(ask(&ok, request(true))).await.unwrap();
        assert_eq!((reply.text.as_str(), reply.fell_back), ("Small.", true));

        // Both failing: the fallback's failure is the call's.
        let both = WithFallback::new(
            canned("big", vec![], down()),
            canned("small", vec![], Err(LlmError::Timeout)),
        );
        let got = events(&both, false).await;
        assert!(
            matches!(got.as_slice(), [Err(LlmError::Timeout)]),
            "{got:?}"
        );
    }

    #[test]
    fn only_models_that_cost_tokens_are_budgeted() {
        let offline: Arc<dyn Provider> = Arc::new(crate::llm::OfflineGameMaster::with_latency(
            std::time::Duration::ZERO,
        ));
        let paid = canned("big", vec![], Ok("x"));
        assert!(!offline.budgeted() && paid.budgeted());
        assert!(WithFallback::new(paid.clone(), offline.clone()).budgeted());
        assert!(!WithFallback::new(offline.clone(), offline).budgeted());
    }
}
