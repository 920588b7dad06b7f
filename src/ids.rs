//! The ground floor: the ids that travel together through sessions, frames,
//! storage rows and HTTP bodies (a session, a turn, a tool call, a trace, a
//! request, a tenant, a site, a character, an area, a node, a seat), and the
//! token [`Usage`] beside them. This module imports nothing of the crate, so
//! every other module can use them without importing upward. Each is its own type, so a
//! function that takes a turn id and a call id cannot be handed them the
//! other way round, while on the wire each is the plain string it always
//! was (`#[serde(transparent)]`).
//!
//! An id is an `Arc<str>`: it is made once (by the hub, the turn, the model
//! or a caller's header) and then cloned into every frame, message, map key
//! and audit row that names it, and never edited; a clone shares the one
//! allocation instead of copying the text.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(transparent)]
        #[schema(value_type = String)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        /// A plain string in a tool's input schema, as the id reads on
        /// the wire.
        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"type": "string"})
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(Arc::from(id))
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(Arc::from(id))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        /// As the string's, so a message that quotes an id (`{id:?}`)
        /// reads as it did when ids were strings.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        /// Maps keyed by the id are looked up with a `&str` (a request path,
        /// a storage row); `Hash` and `Eq` agree with the string's.
        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        /// Reads as its string wherever a `&str` is taken (`&*id`), so a
        /// caller still holding strings needs no conversion to read one.
        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                *self == *other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                **self == *other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                **self == *other.0
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                String::from(&*id.0)
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                *self.0 == **other
            }
        }

        /// Stored as the text column it always was, in both dialects: the
        /// `Arc<str>` is bound as it is (no copy on SQLite) and a read makes
        /// one allocation.
        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            Arc<str>: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <Arc<str> as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <Arc<str> as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            Arc<str>: sqlx::Encode<'q, DB>,
        {
            fn encode(
                self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                self.0.encode(buf)
            }

            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                Arc::clone(&self.0).encode(buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            Arc<str>: sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(Self(<Arc<str> as sqlx::Decode<'r, DB>>::decode(value)?))
            }
        }

        /// The SQLite writer binds it as the borrowed text.
        impl rusqlite::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(&*self.0))
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }
    };
}

id_type! {
    /// A game session (`sess_…`), as the hub made it.
    SessionId
}

id_type! {
    /// A turn of a session (`turn_{n}`), or a direct call's own
    /// (`direct_…`).
    TurnId
}

id_type! {
    /// One tool call of a turn: the model's own id when it is usable, else
    /// one the turn makes.
    CallId
}

id_type! {
    /// Ties a turn's or a service call's audit rows and log events
    /// together (`tr_…`, or the caller's `X-Trace-ID`).
    TraceId
}

id_type! {
    /// A client's `request_id` of a chat or a call: the key by which a
    /// retry is recognised and its ack repeated.
    RequestId
}

id_type! {
    /// A tenant (`default`, or one an operator made) that owns sessions,
    /// keys and sites.
    TenantId
}

id_type! {
    /// A site of a tenant: a published map and its content.
    SiteId
}

id_type! {
    /// A character of a session's game state (`char_…`, or a campaign's own
    /// id for it).
    CharacterId
}

id_type! {
    /// An area of a session's map (`area_…`).
    AreaId
}

id_type! {
    /// A questd node of a cluster, as its claims and logs name it.
    NodeId
}

id_type! {
    /// A seat at a session's table: the host's or one joined by invite.
    SeatId
}

id_type! {
    /// A durable timer of a session (`tmr_…`, docs/protocol.md §9).
    TimerId
}

/// Tokens spent on one or more model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.prompt_tokens += rhs.prompt_tokens;
        self.completion_tokens += rhs.completion_tokens;
    }
}

/// Base 62 with its digits in ASCII order, so that equal-length strings of
/// them sort as the numbers they write.
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Characters of a fresh trace id after `tr_` that write its time.
const TRACE_TIME_CHARS: usize = 8;
/// Characters of a fresh trace id after `tr_`.
const TRACE_CHARS: usize = 24;

impl TraceId {
    /// A new trace id: `tr_` and 24 letters and digits, the first 8 the
    /// time in milliseconds (base 62, good for thousands of years), the
    /// other 16 random (95 bits). Ids made later sort after earlier ones,
    /// so the audit ledger's index by trace grows at its end: a group
    /// commit of many sessions' calls writes one page of it instead of a
    /// page per call.
    pub fn fresh() -> Self {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Self::at(ms, &mut rand::rng())
    }

    fn at(ms: u128, rng: &mut impl rand::Rng) -> Self {
        let mut id = String::with_capacity(3 + TRACE_CHARS);
        id.push_str("tr_");
        let mut time = [b'0'; TRACE_TIME_CHARS];
        let mut rest = ms;
        for c in time.iter_mut().rev() {
            *c = BASE62[(rest % 62) as usize];
            rest /= 62;
        }
        id.extend(time.iter().map(|&c| char::from(c)));
        id.extend(
            (TRACE_TIME_CHARS..TRACE_CHARS).map(|_| char::from(BASE62[rng.random_range(0..62)])),
        );
        Self::from(id)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    /// On the wire an id is the bare string, both ways.
    #[test]
    fn ids_serialize_as_their_string() {
        let session = SessionId::from("sess_Q2xk9fL0aB7cD3eF");
        let turn = TurnId::from("turn_3".to_owned());
        let call = CallId::from("call_1");
        let trace = TraceId::from("tr_p0Q8");
        assert_eq!(
            json!({"session_id": session, "turn_id": turn, "call_id": call, "trace_id": trace}),
            json!({"session_id": "sess_Q2xk9fL0aB7cD3eF", "turn_id": "turn_3",
                   "call_id": "call_1", "trace_id": "tr_p0Q8"})
        );
        assert_eq!(
            serde_json::from_value::<TurnId>(json!("turn_3")).ok(),
            Some(turn)
        );
        assert!(serde_json::from_value::<CallId>(json!(7)).is_err());
        assert!(serde_json::from_value::<SessionId>(json!({"id": "s"})).is_err());
    }

    /// Display, Debug, comparisons and map lookups read the id as its string.
    #[test]
    fn ids_read_as_their_string() {
        let id = CallId::from("call_\"1\"");
        assert_eq!(id.to_string(), "call_\"1\"");
        assert_eq!(format!("{id:?}"), format!("{:?}", "call_\"1\""));
        assert_eq!(id, "call_\"1\"");
        assert_eq!(id.as_str(), "call_\"1\"");
        let mut live = HashMap::new();
        live.insert(SessionId::from("sess_a"), 1);
        assert_eq!(live.get("sess_a"), Some(&1));
        assert_eq!(live.get("sess_b"), None);
        let mut ids = [TraceId::from("tr_b"), TraceId::from("tr_a")];
        ids.sort();
        assert_eq!(ids.map(|t| t.to_string()), ["tr_a", "tr_b"]);
    }

    /// A stored id is its text, through either SQLite driver, and reads
    /// back as the same id.
    #[actix_web::test]
    async fn ids_are_stored_as_their_text() {
        let id = SessionId::from("sess_\u{e9}\"1");
        let pool = sqlx::SqlitePool::connect("sqlite::memory:")
            .await
            .expect("an in-memory database");
        let (text, back): (String, SessionId) = sqlx::query_as("SELECT $1, $1")
            .bind(&id)
            .fetch_one(&pool)
            .await
            .expect("a read");
        assert_eq!((text.as_str(), &back), ("sess_\u{e9}\"1", &id));
        let conn = rusqlite::Connection::open_in_memory().expect("a connection");
        let text: String = conn
            .query_row("SELECT ?1", [&id], |r| r.get(0))
            .expect("a read");
        assert_eq!(text, "sess_\u{e9}\"1");
    }

    /// `tr_` and 24 letters or digits, in the order they were made (by the
    /// millisecond), whatever the random part.
    #[test]
    fn fresh_trace_ids_have_the_documented_shape_and_sort_by_time() {
        let id = TraceId::fresh();
        let tail = id.as_str().strip_prefix("tr_").expect("tr_ prefix");
        assert_eq!(tail.len(), 24, "{id}");
        assert!(tail.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
        let mut rng = rand::rng();
        let times = [
            0,
            61,
            62,
            1_700_000_000_000,
            1_700_000_000_001,
            62u128.pow(8) - 1,
        ];
        let made: Vec<TraceId> = times.iter().map(|&t| TraceId::at(t, &mut rng)).collect();
        let mut sorted = made.clone();
        sorted.sort();
        assert_eq!(sorted, made, "sorted as made");
        assert_eq!(&made[0].as_str()[..11], "tr_00000000");
        assert_eq!(&made[5].as_str()[..11], "tr_zzzzzzzz");
        assert_ne!(TraceId::fresh(), TraceId::fresh(), "random part");
    }
}
