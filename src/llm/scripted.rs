//! A scripted model for tests: canned replies, or a function of the request.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};

use super::{LlmError, ModelEvent, ModelReply, ModelRequest, Provider};

type ScriptFn = dyn Fn(&ModelRequest, usize) -> Result<ModelReply, LlmError> + Send + Sync;

/// Answers from a script. `call` counts model calls across all sessions of
/// the server, from 0.
pub struct ScriptedProvider {
    script: Box<ScriptFn>,
    calls: AtomicUsize,
}

impl ScriptedProvider {
    /// Answers with `script(request, call_number)`.
    pub fn from_fn(
        script: impl Fn(&ModelRequest, usize) -> Result<ModelReply, LlmError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            script: Box::new(script),
            calls: AtomicUsize::new(0),
        }
    }

    /// Answers with each reply in turn, then narrates "done" forever.
    pub fn sequence(replies: Vec<ModelReply>) -> Self {
        let replies = Mutex::new(replies.into_iter());
        Self::from_fn(move |_, _| {
            let next = replies
                .lock()
                .map_err(|e| LlmError::Upstream(e.to_string()))?
                .next();
            Ok(next.unwrap_or_else(|| ModelReply::narrate("done")))
        })
    }

    /// How many model calls were made.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn complete(&self, request: ModelRequest) -> BoxStream<'static, Result<ModelEvent, LlmError>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let reply = (self.script)(&request, n);
        stream::iter([reply.map(ModelEvent::Done)]).boxed()
    }
}
