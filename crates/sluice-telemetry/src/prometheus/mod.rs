//! Prometheus metrics: the text exposition format ([`MetricsWriter`]),
//! the metrics of a [`Registry`](crate::Registry) ([`write_registry`]),
//! and a small HTTP server answering `GET /metrics` ([`MetricsServer`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use sluice_telemetry::Registry;
//! use sluice_telemetry::prometheus::{MetricsServer, render_registry};
//!
//! let registry = Arc::new(Registry::new());
//! let shown = Arc::clone(&registry);
//! let server = MetricsServer::serve(
//!     "127.0.0.1:9090".parse()?,
//!     Arc::new(move || render_registry(&shown)),
//! )?;
//! println!("metrics at http://{}/metrics", server.local_addr());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod http;
mod registry;
mod writer;

pub use http::{MetricsServer, Render};
pub use registry::{render_registry, write_registry};
pub use writer::{MetricType, MetricsWriter, Number, is_label_name, is_metric_name};
