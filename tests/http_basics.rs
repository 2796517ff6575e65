//! Auth, prefixes, liveness, errors: what every route shares.

mod common;

use common::{Server, TOKEN};

#[tokio::test]
async fn every_route_needs_the_token_but_livez() {
    let server = Server::start();
    for path in [
        "/healthz",
        "/fastapi/healthz",
        "/workspace/exists?path=a",
        "/fastapi/workspace/list?path=",
        "/watcher/git_logs",
    ] {
        let missing = server
            .anonymous()
            .get(server.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status().as_u16(), 403, "{path}");
        let body: serde_json::Value = missing.json().await.unwrap();
        assert!(body["detail"].is_string());
        let wrong = server
            .anonymous()
            .get(server.url(path))
            .bearer_auth("not-the-token")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status().as_u16(), 403, "{path}");
        let right = server.get(path).send().await.unwrap();
        assert_eq!(right.status().as_u16(), 200, "{path}");
    }
    let posted = server
        .anonymous()
        .post(server.url("/tools/run_shell_command"))
        .json(&serde_json::json!({"command": "touch pwned"}))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status().as_u16(), 403);
    assert!(!server.ws("pwned").exists());

    let live = server
        .anonymous()
        .get(server.url("/livez"))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status().as_u16(), 200);
    assert_eq!(live.text().await.unwrap(), "OK");
}

#[tokio::test]
async fn healthz_answers_ok_under_both_prefixes() {
    let server = Server::start();
    for path in ["/healthz", "/fastapi/healthz"] {
        let response = server.get(path).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert!(response.headers().contains_key("x-request-id"));
        assert_eq!(response.text().await.unwrap(), "OK");
    }
}

#[tokio::test]
async fn unknown_routes_and_tools_are_404_with_detail() {
    let server = Server::start();
    let route = server.get("/no/such/route").send().await.unwrap();
    assert_eq!(route.status().as_u16(), 404);
    let tool = server
        .post("/tools/no_such_tool")
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(tool.status().as_u16(), 404);
    let body: serde_json::Value = tool.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("no_such_tool"));
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly() {
    let mut server = Server::start();
    let status = server.terminate().expect("boxd exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    let _ = TOKEN;
}

#[tokio::test]
async fn every_documented_route_exists() {
    let server = Server::start();
    let document: serde_json::Value = server
        .get("/openapi.json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.len() >= 30);
    for (path, operations) in paths {
        // Streams that would stay open, and protocols that need their own handshake.
        if ["/watch", "/mcp", "/processes/{id}/ws"].contains(&path.as_str()) {
            continue;
        }
        let concrete = path
            .replace("{tool_name}", "no_such_tool")
            .replace("{id}", "p-none");
        for method in operations.as_object().unwrap().keys() {
            let method: reqwest::Method = method.to_uppercase().parse().unwrap();
            let response = server
                .anonymous()
                .request(method.clone(), server.url(&concrete))
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({}))
                .send()
                .await
                .unwrap();
            let status = response.status();
            let text = response.text().await.unwrap();
            assert_ne!(status, 405, "{method} {path}");
            assert!(!text.contains("no such route"), "{method} {path}: {text}");
        }
    }
}
