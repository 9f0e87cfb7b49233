//! The route table: which handler and upstream pool serve a request, by host and path prefix.
//!
//! A route with a matching host beats a route for any host; among those, the longest path prefix
//! wins (plain prefix, as nginx's `location /prefix`). Pure lookup, no I/O.

use crate::config::{AccessCheckMode, HandlerKind, RouteConfig};

#[derive(Debug, Clone)]
pub struct Route {
    pub index: usize,
    host: Option<String>,
    prefix: String,
    pub handler: HandlerKind,
    /// Name of the upstream pool, for proxy routes.
    pub upstream: Option<String>,
    pub access_check: AccessCheckMode,
}

pub struct Routes {
    routes: Vec<Route>,
}

impl Routes {
    pub fn new(config: &[RouteConfig]) -> Self {
        let routes = config
            .iter()
            .enumerate()
            .map(|(index, r)| Route {
                index,
                host: r.host.as_ref().map(|h| h.to_ascii_lowercase()),
                prefix: r.path_prefix.clone(),
                handler: r.handler,
                upstream: r.upstream.clone(),
                access_check: r.access_check,
            })
            .collect();
        Self { routes }
    }

    /// `host` may carry a port; it is compared without it, case-insensitively.
    pub fn find(&self, host: Option<&str>, path: &str) -> Option<&Route> {
        let host = host.map(strip_port);
        self.routes
            .iter()
            .filter(|r| path.starts_with(&r.prefix))
            .filter(|r| match (&r.host, host) {
                (None, _) => true,
                (Some(want), Some(got)) => want.eq_ignore_ascii_case(got),
                (Some(_), None) => false,
            })
            .max_by_key(|r| (r.host.is_some(), r.prefix.len(), std::cmp::Reverse(r.index)))
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // [v6]:port
        return host.split_once(']').map_or(host, |(h, _)| &h[1..]);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(host: Option<&str>, prefix: &str, up: &str) -> RouteConfig {
        RouteConfig {
            host: host.map(str::to_owned),
            path_prefix: prefix.to_owned(),
            upstream: Some(up.to_owned()),
            handler: HandlerKind::Proxy,
            access_check: AccessCheckMode::Off,
        }
    }

    #[test]
    fn host_then_longest_prefix() {
        let r =
            Routes::new(&[route(None, "/", "default"), route(None, "/api", "api"), route(Some("a.local"), "/", "a")]);
        let up = |h, p| r.find(h, p).and_then(|r| r.upstream.clone());
        assert_eq!(up(Some("x.local"), "/api/v1").as_deref(), Some("api"));
        assert_eq!(up(Some("A.local:8080"), "/api/v1").as_deref(), Some("a"));
        assert_eq!(up(None, "/other").as_deref(), Some("default"));
        let only_api = Routes::new(&[route(None, "/api", "api")]);
        assert!(only_api.find(None, "/other").is_none());
    }
}
