//! The gallery's items: `GET /gallery/{id}`, its image, and the operator's additions and
//! deletions (`Authorization: Bearer`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shared::api::{AddItemsRequest, ChangeResponse, ErrorCode, ErrorResponse, ItemMeta};
use shared::params::limits;

use super::error::ApiError;
use crate::gallery::store::StoredItem;
use crate::item::{GalleryItem, SIDE};
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

/// Most images one `POST /api/v1/gallery` may add.
pub const MAX_ADD: usize = 1_000;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/gallery", post(add_items))
        .route("/gallery/{id}", get(gallery_item).delete(delete_item))
        .route("/gallery/{id}/image.png", get(gallery_image))
}

fn path_id(id: Result<Path<u64>, PathRejection>) -> Result<u64, ApiError> {
    id.map(|Path(id)| id).map_err(|e| {
        ApiError::BadRequest(ErrorResponse::new(ErrorCode::InvalidInput, e.body_text()))
    })
}

fn lookup(s: &AppState, id: u64) -> Result<Arc<GalleryItem>, ApiError> {
    s.catalogue
        .read()
        .unwrap()
        .get(&id)
        .cloned()
        .ok_or(ApiError::NotFound(id))
}

async fn gallery_item(
    State(s): Shared,
    id: Result<Path<u64>, PathRejection>,
) -> Result<Json<ItemMeta>, ApiError> {
    let item = lookup(&s, path_id(id)?)?;
    Ok(Json(ItemMeta {
        id: item.id,
        label: item.label,
        class_name: s.config.class_names[item.label as usize].clone(),
    }))
}

async fn gallery_image(
    State(s): Shared,
    id: Result<Path<u64>, PathRejection>,
) -> Result<Response, ApiError> {
    let item = lookup(&s, path_id(id)?)?;
    Ok(([(header::CONTENT_TYPE, "image/png")], item.png().to_vec()).into_response())
}

/// Mutations need `Authorization: Bearer <token>`; with no token configured they are off.
fn authorize(s: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &s.admin_token else {
        return Err(ApiError::Forbidden(
            "gallery changes are disabled (no admin token configured)".into(),
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compare in constant time with respect to the token's content.
    let ok = given.is_some_and(|g| {
        g.len() == token.len()
            && g.bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// The token is checked before a byte of the body is read (the body is taken unread and
/// parsed only after): without it, 401 at once, not after waiting for a body.
async fn add_items(
    State(s): Shared,
    req: axum::extract::Request,
) -> Result<(StatusCode, Json<ChangeResponse>), ApiError> {
    authorize(&s, req.headers())?;
    let Json(req): Json<AddItemsRequest> = Json::from_request(req, &s).await?;
    let invalid = |msg: String| ApiError::Invalid(ErrorResponse::new(ErrorCode::InvalidInput, msg));
    if req.items.is_empty() || req.items.len() > MAX_ADD {
        return Err(ApiError::Invalid(ErrorResponse::new(
            ErrorCode::TooLarge,
            format!(
                "items must hold 1..={MAX_ADD} images, got {}",
                req.items.len()
            ),
        )));
    }
    let n_pixels = (SIDE * SIDE) as usize;
    for it in &req.items {
        if it.label >= s.config.smlq.num_classes {
            return Err(invalid(format!(
                "label {} is outside 0..{}",
                it.label, s.config.smlq.num_classes
            )));
        }
        if it.pixels.len() != n_pixels {
            return Err(ApiError::Invalid(ErrorResponse::new(
                ErrorCode::DimensionMismatch,
                format!(
                    "pixels must hold {n_pixels} bytes ({SIDE}×{SIDE} greyscale), got {}",
                    it.pixels.len()
                ),
            )));
        }
    }
    let state = Arc::clone(&s);
    let resp = tokio::task::spawn_blocking(move || -> Result<ChangeResponse, ApiError> {
        // The model runs before the catalogue is locked, so reads of it (status, an item)
        // never wait on it.
        let features: Vec<Vec<f32>> = req
            .items
            .iter()
            .map(|it| state.model.infer(&it.pixels).map(|inf| inf.features))
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        // One writer at a time: ids, store and catalogue change together.
        let mut cat = state.catalogue.write().unwrap();
        // The whole gallery is one block a client may download: no more items than a block
        // may hold.
        if cat.len() + req.items.len() > limits::MAX_BLOCK_ITEMS {
            return Err(ApiError::Invalid(ErrorResponse::new(
                ErrorCode::TooLarge,
                format!(
                    "the gallery holds {} images; {} more would pass its limit of {}",
                    cat.len(),
                    req.items.len(),
                    limits::MAX_BLOCK_ITEMS
                ),
            )));
        }
        // Past every id ever given, deleted ones too: an id names one image for good (a
        // client's results and the older partition versions still served name it).
        let next = state
            .store
            .next_id()
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let first = cat.keys().next_back().map_or(0, |m| m + 1).max(next);
        let mut new = Vec::with_capacity(req.items.len());
        for (i, (it, f)) in req.items.into_iter().zip(features).enumerate() {
            let id = first + i as u64;
            let item = GalleryItem::with_features(id, it.label, it.pixels, f)
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            new.push(Arc::new(item));
        }
        let version = state.catalogue_version.load(Ordering::SeqCst) + 1;
        let stored: Vec<StoredItem> = new
            .iter()
            .map(|it| StoredItem {
                id: it.id,
                label: it.label,
                pixels: it.pixels.to_vec(),
            })
            .collect();
        state
            .store
            .put_items(&stored, version)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        for it in &new {
            cat.insert(it.id, Arc::clone(it));
        }
        state.catalogue_version.store(version, Ordering::SeqCst);
        Ok(ChangeResponse {
            ids: new.iter().map(|it| it.id).collect(),
            catalogue_version: version,
        })
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))??;
    s.schedule_reembed();
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

async fn delete_item(
    State(s): Shared,
    headers: HeaderMap,
    id: Result<Path<u64>, PathRejection>,
) -> Result<(StatusCode, Json<ChangeResponse>), ApiError> {
    authorize(&s, &headers)?;
    let id = path_id(id)?;
    let state = Arc::clone(&s);
    let resp = tokio::task::spawn_blocking(move || -> Result<ChangeResponse, ApiError> {
        let mut cat = state.catalogue.write().unwrap();
        if !cat.contains_key(&id) {
            return Err(ApiError::NotFound(id));
        }
        if cat.len() <= 2 {
            return Err(ApiError::Conflict(
                "the gallery needs at least 2 images".into(),
            ));
        }
        let version = state.catalogue_version.load(Ordering::SeqCst) + 1;
        state
            .store
            .delete_item(id, version)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        cat.remove(&id);
        state.catalogue_version.store(version, Ordering::SeqCst);
        Ok(ChangeResponse {
            ids: vec![id],
            catalogue_version: version,
        })
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))??;
    s.schedule_reembed();
    Ok((StatusCode::ACCEPTED, Json(resp)))
}
