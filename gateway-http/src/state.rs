//! What every handler shares: the upstream, the HTTP metrics and the settings.

use std::sync::Arc;

use crate::metrics::HttpMetrics;

/// Settings of the HTTP layer itself.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// Whether `/metrics` is served (the server may keep it for an admin port later).
    pub serve_metrics: bool,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings { max_body_bytes: 16 * 1024 * 1024, serve_metrics: true }
    }
}

/// Handler state.
pub struct AppState<U> {
    pub upstream: Arc<U>,
    pub metrics: Arc<HttpMetrics>,
    pub settings: Arc<GatewaySettings>,
}

// Derived Clone would demand `U: Clone`; only the Arcs are cloned.
impl<U> Clone for AppState<U> {
    fn clone(&self) -> Self {
        AppState { upstream: self.upstream.clone(), metrics: self.metrics.clone(), settings: self.settings.clone() }
    }
}
