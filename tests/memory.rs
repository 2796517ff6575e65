//! `GET /memory`: what boxd, its guard and each family's processes hold, behind the token.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Fetch, Server, python};

fn start() -> Server {
    Server::start_with(&["--python", &python(), "--tools", "shell,ipython,processes"])
}

async fn reading(server: &Server) -> Value {
    let response = server.get("/memory").send().await.expect("request");
    assert_eq!(response.status(), 200);
    response.json().await.expect("json answer")
}

fn bytes(usage: &Value, field: &str) -> u64 {
    usage[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {usage}"))
}

/// Every enabled family is listed; after one cell the kernel is counted (a non-zero PSS), a live
/// process is counted for `processes`, boxd and its guard are measured, and the total adds up.
#[tokio::test]
async fn names_each_family_and_counts_its_processes() {
    let server = start();
    let answer = server
        .post("/tools/run_ipython_cell")
        .json(&json!({"code": "x = 1"}))
        .fetch_json()
        .await;
    assert_eq!(answer["isError"], false, "{answer}");
    let started = server
        .post("/processes")
        .json(&json!({"command": "sleep 30"}))
        .fetch_json()
        .await;
    assert_eq!(started["status"], "running", "{started}");

    // The guard starts once the previous leftovers are swept: wait for it (bounded).
    let mut memory = Value::Null;
    for _ in 0..100 {
        memory = reading(&server).await;
        if memory["guard"].is_object() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let families = memory["families"].as_object().expect("families");
    let mut names: Vec<&str> = families.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["ipython", "processes", "shell"], "{memory}");

    let kernel = &memory["families"]["ipython"];
    assert!(kernel["processes"].as_u64() >= Some(1), "{memory}");
    // An interpreter with IPython imported holds tens of MiB.
    assert!(bytes(kernel, "pss_bytes") > 4 << 20, "{memory}");
    assert!(
        bytes(kernel, "rss_bytes") >= bytes(kernel, "pss_bytes"),
        "{memory}"
    );
    let live = &memory["families"]["processes"];
    assert!(live["processes"].as_u64() >= Some(1), "{memory}");
    assert!(bytes(live, "pss_bytes") > 0, "{memory}");
    assert_eq!(memory["families"]["shell"]["processes"], 0, "{memory}");

    assert_eq!(memory["boxd"]["pid"], server.pid(), "{memory}");
    assert!(bytes(&memory["boxd"], "pss_bytes") > 1 << 20, "{memory}");
    let guard = &memory["guard"];
    assert!(guard["pid"].as_u64().is_some(), "{memory}");
    assert!(bytes(guard, "rss_bytes") > 0, "{memory}");
    // No `boxd init` above a test's boxd.
    assert!(memory["init"].is_null(), "{memory}");
    assert_eq!(memory["partial"], false, "{memory}");

    let parts = [&memory["boxd"], guard, &memory["unattributed"]]
        .into_iter()
        .chain(families.values());
    let (processes, pss) = parts.fold((0, 0), |(processes, pss), usage| {
        (
            processes + usage["processes"].as_u64().unwrap_or(1),
            pss + bytes(usage, "pss_bytes"),
        )
    });
    assert_eq!(memory["total"]["processes"], processes, "{memory}");
    assert_eq!(bytes(&memory["total"], "pss_bytes"), pss, "{memory}");
}

/// Without the token (or with a wrong one) it is refused, under both prefixes.
#[tokio::test]
async fn is_refused_without_the_token() {
    let server = Server::start_with(&["--tools", "shell"]);
    for path in ["/memory", "/fastapi/memory"] {
        let anonymous = server
            .anonymous()
            .get(server.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(anonymous.status(), 403, "{path}");
        let wrong = server
            .anonymous()
            .get(server.url(path))
            .bearer_auth("not-the-token")
            .send()
            .await
            .expect("request");
        assert_eq!(wrong.status(), 403, "{path}");
    }
    let memory = server.get("/fastapi/memory").fetch_json().await;
    assert!(memory["families"]["shell"].is_object(), "{memory}");
}

/// Many readings at once: each is answered (200, or 429 with `Retry-After` past the two at once),
/// never a server error.
#[tokio::test]
async fn readings_at_once_never_fail() {
    let server = Server::start_with(&["--tools", "shell"]);
    let readings = (0..12).map(|_| server.get("/memory").send());
    let answers = futures_util::future::join_all(readings).await;
    let mut answered = 0;
    for answer in answers {
        let answer = answer.expect("request");
        let status = answer.status().as_u16();
        assert!(matches!(status, 200 | 429), "{status}");
        if status == 429 {
            assert!(answer.headers().contains_key("retry-after"));
        } else {
            answered += 1;
        }
    }
    assert!(answered >= 2, "{answered}");
}
