//! `PUT` and `GET /api/v1/sites/{site_id}` (docs/protocol.md §1.12.1): a tenant's
//! site gets its NPCs, content, prompts and map from a campaign file. The
//! tools then run against it through the tool API (`service.rs`).

use actix_web::{HttpRequest, HttpResponse, web};

use super::body::json_body;
use super::campaign::campaign_start;
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::ids::SiteId;
use crate::protocol::http::SiteSummary;
use crate::sites::{MAX_SITE_ID_CHARS, MAX_SITES_PER_TENANT, SiteError, valid_site_id};

pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::http::Method;
    super::routes::add(cfg, Method::PUT, "/api/v1/sites/{site_id}", put);
    super::routes::add(cfg, Method::GET, "/api/v1/sites/{site_id}", get);
}

/// The site id of the path, checked.
fn site_id(path: web::Path<String>) -> Result<SiteId, ApiError> {
    let id = path.into_inner();
    if valid_site_id(&id) {
        Ok(SiteId::from(id))
    } else {
        Err(ApiError::bad_request(format!(
            "a site id is 1 to {MAX_SITE_ID_CHARS} letters, digits, '_', '.', ':' or '-'"
        )))
    }
}

/// A site failure as an HTTP error.
pub fn site_failed(e: SiteError, site_id: &str) -> ApiError {
    match e {
        SiteError::NotFound => ApiError::not_found(format!(
            "no site {site_id:?} for this tenant; give it content with PUT /api/v1/sites/{site_id}"
        )),
        SiteError::TooMany => ApiError::new(
            ErrorCode::Conflict,
            format!("this tenant has {MAX_SITES_PER_TENANT} sites, the most it may have"),
        ),
        SiteError::Contended => {
            super::errors::overloaded("other writes to this site kept coming first")
        }
        SiteError::Storage(e) => super::errors::storage_failed(e),
    }
}

/// Gives the site (of the key's tenant) the campaign the body names:
/// `201` for a new site, `200` when it replaced one.
#[utoipa::path(put, path = "/api/v1/sites/{site_id}", tag = "sites",
    security(("internal_key" = [])),
    params(("site_id" = String, Path, description = "The site")),
    request_body(content = crate::protocol::requests::NewSession, description = "The campaign the site gets (`visibility` is not read)"),
    responses(
        (status = 200, description = "The site was replaced", body = crate::protocol::http::SiteSummary<'static>),
        (status = 201, description = "A new site", body = crate::protocol::http::SiteSummary<'static>),
        (status = 400, description = "Bad body", body = crate::protocol::http::ErrorBody), (status = 401, description = "No key", body = crate::protocol::http::ErrorBody), (status = 422, description = "The campaign is invalid", body = crate::protocol::http::ErrorBody)))]
async fn put(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let grant = state.keys.require(&req, "giving a site its content")?;
    let site_id = site_id(path)?;
    let tenant_id = grant.tenant_id.clone();
    state.service.check_grant(&state.metrics, &grant)?;
    if let Some(reason) = state.store.refusing() {
        return Err(super::errors::overloaded(reason));
    }
    let body = crate::protocol::requests::NewSession::from(json_body(body).await?);
    let start = campaign_start(&state, body).await?;
    let put = state
        .sites
        .put(&tenant_id, &site_id, start.state)
        .await
        .map_err(|e| site_failed(e, &site_id))?;
    let site = state
        .sites
        .get(&tenant_id, &site_id)
        .await
        .map_err(|e| site_failed(e, &site_id))?;
    let summary = SiteSummary::new(&grant.tenant_id, &site_id, &site);
    Ok(if put.created {
        HttpResponse::Created().json(summary)
    } else {
        HttpResponse::Ok().json(summary)
    })
}

/// The site of the key's tenant, as stored now.
#[utoipa::path(get, path = "/api/v1/sites/{site_id}", tag = "sites",
    security(("internal_key" = [])),
    params(("site_id" = String, Path, description = "The site")),
    responses(
        (status = 200, description = "The site as stored", body = crate::protocol::http::SiteSummary<'static>),
        (status = 401, description = "No key", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such site", body = crate::protocol::http::ErrorBody)))]
async fn get(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let grant = state.keys.require(&req, "reading a site")?;
    let site_id = site_id(path)?;
    let tenant_id = grant.tenant_id.clone();
    state.service.check_grant(&state.metrics, &grant)?;
    let site = state
        .sites
        .get(&tenant_id, &site_id)
        .await
        .map_err(|e| site_failed(e, &site_id))?;
    Ok(HttpResponse::Ok().json(SiteSummary::new(&grant.tenant_id, &site_id, &site)))
}
