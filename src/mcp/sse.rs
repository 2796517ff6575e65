//! The client side of MCP's legacy HTTP+SSE transport (protocol 2024-11-05). rmcp 3.9 no longer ships it,
//! but hosted servers still speak it (FastMCP's `sse`, many remote servers, and upstream's default for a
//! `url` config without `type`), so boxd keeps this small adapter: a GET opens the event stream whose first
//! `endpoint` event names where to POST client messages; `message` events carry the server's messages.

use std::collections::BTreeMap;
use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use reqwest::header::{ACCEPT, HeaderMap, HeaderName, HeaderValue};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::{Sse, SseByteStream};

type Events = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

pub struct SseClientTransport {
    http: reqwest::Client,
    post_url: reqwest::Url,
    headers: HeaderMap,
    events: Events,
}

pub fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, String> {
    headers
        .iter()
        .map(|(name, value)| {
            let name = HeaderName::try_from(name.as_str())
                .map_err(|err| format!("header {name:?}: {err}"))?;
            let value = HeaderValue::try_from(value.as_str())
                .map_err(|err| format!("header {name}: {err}"))?;
            Ok((name, value))
        })
        .collect()
}

impl SseClientTransport {
    /// Opens the event stream and waits for the `endpoint` event.
    pub async fn connect(url: &str, headers: &BTreeMap<String, String>) -> Result<Self, String> {
        let headers = header_map(headers)?;
        let http = reqwest::Client::new();
        let response = http
            .get(url)
            .headers(headers.clone())
            .header(ACCEPT, "text/event-stream")
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|err| format!("GET {url}: {err}"))?;
        let mut events: Events = Box::pin(SseByteStream::new(response.bytes_stream()));
        let endpoint = loop {
            match events.next().await {
                Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                    break event.data.unwrap_or_default();
                }
                Some(Ok(_)) => continue,
                Some(Err(err)) => return Err(format!("event stream of {url}: {err}")),
                None => {
                    return Err(format!(
                        "{url} closed the event stream before naming its endpoint"
                    ));
                }
            }
        };
        let base = reqwest::Url::parse(url).map_err(|err| format!("{url}: {err}"))?;
        let post_url = base
            .join(endpoint.trim())
            .map_err(|err| format!("endpoint {endpoint:?} of {url}: {err}"))?;
        // The configured headers often carry the remote's credentials: they go to the origin the config
        // names, never to one a server announces (the Python MCP SDK refuses the same).
        if post_url.origin() != base.origin() {
            return Err(format!(
                "{url} announced its message endpoint on another origin ({}); refused, so that the \
                 configured headers are sent to {} only",
                post_url.origin().ascii_serialization(),
                base.origin().ascii_serialization()
            ));
        }
        Ok(SseClientTransport {
            http,
            post_url,
            headers,
            events,
        })
    }
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = self
            .http
            .post(self.post_url.clone())
            .headers(self.headers.clone())
            .json(&item);
        async move {
            request
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map(|_| ())
                .map_err(std::io::Error::other)
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let event = self.events.next().await?.ok()?;
            if !matches!(event.event.as_deref(), None | Some("message")) {
                continue;
            }
            let Some(data) = event.data else { continue };
            match serde_json::from_str(&data) {
                Ok(message) => return Some(message),
                Err(err) => tracing::warn!("ignoring an SSE message that is not JSON-RPC: {err}"),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the response stream closes the GET; the server ends the session on disconnect.
        self.events = Box::pin(futures_util::stream::empty());
        Ok(())
    }
}
