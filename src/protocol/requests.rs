//! The HTTP request bodies and query strings that more than one route
//! reads, beside the answers of `http.rs`: what a caller sends is wire
//! format as much as what it gets.

use serde::Deserialize;
use serde_json::Value;

/// The body of `POST /api/v1/sessions` and `PUT /api/v1/sites/{site_id}`:
/// its fields as sent (any JSON), each checked by the handler so that a
/// wrong one is answered with what it should be.
#[derive(Debug, Default, utoipa::ToSchema)]
pub struct NewSession {
    /// A built-in campaign (`GET /api/v1/campaigns`).
    #[schema(value_type = Option<String>)]
    pub campaign_id: Option<Value>,
    /// A whole inline campaign (schema `Campaign`); wins over `campaign_id`.
    #[schema(value_type = Option<Object>)]
    pub campaign: Option<Value>,
    /// `"private"` (the default) or `"public"` (listed, watchable).
    #[schema(value_type = Option<String>)]
    pub visibility: Option<Value>,
    /// Which of the game master's calls wait for a person's decision
    /// (docs/protocol.md §19): `{"tools":[...],"timeout_s":600}`; wins over
    /// the campaign's own `approval`.
    #[schema(value_type = Option<Object>)]
    pub approval: Option<Value>,
}

impl From<Value> for NewSession {
    /// The fields of a body (a body that is not an object has none).
    fn from(body: Value) -> Self {
        let Value::Object(mut fields) = body else {
            return Self::default();
        };
        Self {
            campaign_id: fields.remove("campaign_id"),
            campaign: fields.remove("campaign"),
            visibility: fields.remove("visibility"),
            approval: fields.remove("approval"),
        }
    }
}

/// `?after_seq=N&limit=M`: a page of a session's actions, or of its story
/// (the console's).
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SeqPage {
    pub after_seq: Option<u64>,
    pub limit: Option<u32>,
}

/// `?after_id=N&limit=M` of a session's audit ledger.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    pub after_id: Option<i64>,
    pub limit: Option<u32>,
}
