//! `/workspace/*` against the real binary: contract behaviour, confinement, streaming and atomicity.

use crate::common;

use std::os::unix::fs::symlink;

use common::{Fetch, Server, encode};
use serde_json::{Value, json};

#[tokio::test]
async fn write_read_list_exists_move_mkdir_delete() {
    let server = Server::start();
    let written: Value = server
        .put("/workspace/file?path=dir/a.txt")
        .body("hello")
        .fetch_json()
        .await;
    assert_eq!(written["type"], "file");
    assert_eq!(written["size"], 5);
    assert_eq!(written["name"], "a.txt");
    assert_eq!(written["path"], server.ws("dir/a.txt").to_str().unwrap());
    assert!(written["mtime_ms"].as_i64().unwrap() > 0);

    let text = server
        .get("/workspace/file?path=dir/a.txt")
        .send()
        .await
        .unwrap();
    assert!(
        text.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(text.text().await.unwrap(), "hello");
    let absolute = format!(
        "/workspace/file?path={}&format=bytes",
        encode(server.ws("dir/a.txt").to_str().unwrap())
    );
    assert_eq!(
        server
            .get(&absolute)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .as_ref(),
        b"hello"
    );

    let exists: Value = server
        .get("/workspace/exists?path=dir/a.txt")
        .fetch_json()
        .await;
    assert_eq!(exists, json!({"exists": true}));
    let missing: Value = server.get("/workspace/exists?path=nope").fetch_json().await;
    assert_eq!(missing, json!({"exists": false}));

    let created: Value = server
        .post("/workspace/mkdir")
        .json(&json!({"path": "x/y"}))
        .fetch_json()
        .await;
    assert_eq!(created, json!({"created": true}));
    let again: Value = server
        .post("/workspace/mkdir")
        .json(&json!({"path": "x/y"}))
        .fetch_json()
        .await;
    assert_eq!(again, json!({"created": false}));
    assert_eq!(
        server
            .post("/workspace/mkdir")
            .json(&json!({"path": "dir/a.txt"}))
            .fetch_status()
            .await,
        409
    );

    let moved: Value = server
        .post("/workspace/move")
        .json(&json!({"source": "dir/a.txt", "destination": "x/y/b.txt"}))
        .fetch_json()
        .await;
    assert_eq!(moved["path"], server.ws("x/y/b.txt").to_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(server.ws("x/y/b.txt")).unwrap(),
        "hello"
    );
    assert_eq!(
        server
            .post("/workspace/move")
            .json(&json!({"source": "dir/a.txt", "destination": "z"}))
            .fetch_status()
            .await,
        404
    );

    let listed: Value = server
        .get("/workspace/list?path=x&depth=2")
        .fetch_json()
        .await;
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["y", "b.txt"]);
    let shallow: Value = server.get("/workspace/list?path=x").fetch_json().await;
    assert_eq!(shallow.as_array().unwrap().len(), 1);
    assert_eq!(shallow[0]["type"], "dir");
    assert!(shallow[0]["size"].is_null());

    assert_eq!(
        server
            .delete("/workspace/entry?path=x")
            .fetch_status()
            .await,
        204
    );
    assert!(!server.ws("x").exists());
    assert_eq!(
        server
            .delete("/workspace/entry?path=x")
            .fetch_status()
            .await,
        204
    );
}

#[tokio::test]
async fn contract_status_codes() {
    let server = Server::start();
    std::fs::create_dir_all(server.ws("adir")).unwrap();
    std::fs::write(server.ws("afile"), "x").unwrap();
    assert_eq!(
        server
            .get("/workspace/file?path=missing")
            .fetch_status()
            .await,
        404
    );
    assert_eq!(
        server.get("/workspace/file?path=adir").fetch_status().await,
        404
    );
    assert_eq!(
        server
            .put("/workspace/file?path=adir")
            .body("x")
            .fetch_status()
            .await,
        409
    );
    assert_eq!(
        server
            .put("/workspace/file?path=afile/child")
            .body("x")
            .fetch_status()
            .await,
        409
    );
    assert_eq!(
        server
            .get("/workspace/list?path=afile")
            .fetch_status()
            .await,
        404
    );
    assert_eq!(
        server
            .get("/workspace/list?path=missing")
            .fetch_status()
            .await,
        404
    );
    assert_eq!(
        server
            .get("/workspace/list?path=adir&depth=0")
            .fetch_status()
            .await,
        400
    );
    assert_eq!(server.get("/workspace/file").fetch_status().await, 400);
    assert_eq!(
        server
            .get("/workspace/file?path=afile&format=xml")
            .fetch_status()
            .await,
        400
    );
    assert_eq!(
        server
            .get("/workspace/file?path=a%00b")
            .fetch_status()
            .await,
        400
    );
    assert_eq!(
        server
            .put("/workspace/file?path=a%00b")
            .body("x")
            .fetch_status()
            .await,
        400
    );
    assert_eq!(
        server
            .post("/workspace/move")
            .json(&json!({"source": "afile"}))
            .fetch_status()
            .await,
        400
    );
    assert_eq!(
        server
            .post("/workspace/mkdir")
            .body("{not json")
            .fetch_status()
            .await,
        422
    );
    assert_eq!(
        server.delete("/workspace/entry?path=").fetch_status().await,
        403
    );
    assert!(server.workspace.exists());
}

#[tokio::test]
async fn escapes_are_refused_and_nothing_outside_is_touched() {
    let server = Server::start();
    let outside = server.workspace.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    let sibling = server.workspace.parent().unwrap().join("workspace2");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("s.txt"), "sibling").unwrap();
    symlink(outside.join("secret.txt"), server.ws("file-link")).unwrap();
    symlink(&outside, server.ws("dir-link")).unwrap();
    std::fs::create_dir_all(server.ws("inside")).unwrap();
    std::fs::write(server.ws("inside/ok.txt"), "ok").unwrap();
    symlink("inside", server.ws("inside-link")).unwrap();

    let escapes = [
        "../outside/secret.txt".to_owned(),
        "inside/../../outside/secret.txt".to_owned(),
        outside.join("secret.txt").to_str().unwrap().to_owned(),
        "/etc/passwd".to_owned(),
        sibling.join("s.txt").to_str().unwrap().to_owned(),
        "dir-link/secret.txt".to_owned(),
        "dir-link/new.txt".to_owned(),
    ];
    for path in &escapes {
        common::assert_read_and_write_refused(&server, path).await;
        let q = encode(path);
        assert_eq!(
            server
                .get(&format!("/workspace/exists?path={q}"))
                .fetch_status()
                .await,
            403,
            "exists {path}"
        );
        assert_eq!(
            server
                .delete(&format!("/workspace/entry?path={q}"))
                .fetch_status()
                .await,
            403,
            "delete {path}"
        );
        assert_eq!(
            server
                .post("/workspace/mkdir")
                .json(&json!({"path": path}))
                .fetch_status()
                .await,
            403,
            "mkdir {path}"
        );
        assert_eq!(
            server
                .post("/workspace/move")
                .json(&json!({"source": path, "destination": "stolen"}))
                .fetch_status()
                .await,
            403,
            "move from {path}"
        );
        assert_eq!(
            server
                .post("/workspace/move")
                .json(&json!({"source": "inside/ok.txt", "destination": path}))
                .fetch_status()
                .await,
            403,
            "move to {path}"
        );
    }
    // A final link out is an entry of its own for delete, move and exists (tests/confine.rs), but what
    // reads or writes through it is refused.
    assert_eq!(
        server
            .get("/workspace/file?path=file-link")
            .fetch_status()
            .await,
        403
    );
    assert_eq!(
        server
            .put("/workspace/file?path=file-link")
            .body("pwned")
            .fetch_status()
            .await,
        403
    );
    assert_eq!(
        server
            .post("/workspace/mkdir")
            .json(&json!({"path": "file-link"}))
            .fetch_status()
            .await,
        403
    );
    for dir in ["dir-link", "..", sibling.to_str().unwrap()] {
        assert_eq!(
            server
                .get(&format!("/workspace/list?path={}", encode(dir)))
                .fetch_status()
                .await,
            403,
            "list {dir}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
    assert_eq!(
        std::fs::read_to_string(sibling.join("s.txt")).unwrap(),
        "sibling"
    );
    assert!(!outside.join("new.txt").exists());
    assert!(!server.ws("stolen").exists());
    assert!(server.ws("inside/ok.txt").exists());

    // Symlinks that stay inside work, and listing reports links as links without following them.
    assert_eq!(
        server
            .get("/workspace/file?path=inside-link/ok.txt")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "ok"
    );
    let listed: Value = server
        .get("/workspace/list?path=&depth=5")
        .fetch_json()
        .await;
    let kinds: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["name"].as_str().unwrap().to_owned(),
                entry["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for link in ["file-link", "dir-link", "inside-link"] {
        assert!(
            kinds.contains(&(link.to_owned(), "symlink".to_owned())),
            "{kinds:?}"
        );
    }
    assert!(
        !kinds.iter().any(|(name, _)| name == "secret.txt"),
        "listing followed a link out: {kinds:?}"
    );
}

#[tokio::test]
async fn large_file_round_trip_streams_and_ranges() {
    let server = Server::start();
    let size = 64 * 1024 * 1024;
    let body: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let written: Value = server
        .put("/workspace/file?path=big.bin")
        .body(body.clone())
        .fetch_json()
        .await;
    assert_eq!(written["size"], size as u64);
    let response = server
        .get("/workspace/file?path=big.bin&format=bytes")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-length"],
        size.to_string().as_str()
    );
    let read = response.bytes().await.unwrap();
    assert!(
        read.as_ref() == body.as_slice(),
        "64 MiB came back different"
    );

    let ranged = server
        .get("/workspace/file?path=big.bin&format=bytes")
        .header("Range", "bytes=1000-1009")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status().as_u16(), 206);
    assert_eq!(
        ranged.headers()["content-range"],
        format!("bytes 1000-1009/{size}").as_str()
    );
    assert_eq!(ranged.bytes().await.unwrap().as_ref(), &body[1000..1010]);
    let suffix = server
        .get("/workspace/file?path=big.bin&format=bytes")
        .header("Range", "bytes=-5")
        .send()
        .await
        .unwrap();
    assert_eq!(suffix.bytes().await.unwrap().as_ref(), &body[size - 5..]);
    let beyond = server
        .get("/workspace/file?path=big.bin")
        .header("Range", format!("bytes={size}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(beyond.status().as_u16(), 416);
}

#[tokio::test]
async fn aborted_upload_leaves_old_content_intact() {
    let server = Server::start();
    std::fs::write(server.ws("keep.txt"), "original").unwrap();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![
        Ok(vec![b'x'; 1024 * 1024]),
        Err(std::io::Error::other("client gives up")),
    ];
    let result = server
        .put("/workspace/file?path=keep.txt")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await;
    assert!(result.is_err() || !result.unwrap().status().is_success());
    // boxd sees the broken body and removes its staging file some time after the client gave up.
    let leftovers = || -> Vec<_> {
        std::fs::read_dir(&server.workspace)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".boxd-upload")
            })
            .map(|entry| entry.file_name())
            .collect()
    };
    assert!(
        common::eventually(common::SETTLE, || leftovers().is_empty()).await,
        "staging files left behind: {:?}",
        leftovers()
    );
    assert_eq!(
        std::fs::read_to_string(server.ws("keep.txt")).unwrap(),
        "original"
    );
}

#[tokio::test]
async fn binary_file_read_as_text_is_not_a_server_error() {
    let server = Server::start();
    std::fs::write(server.ws("blob"), [0xff, 0xfe, 0x00, 0x41]).unwrap();
    let response = server
        .get("/workspace/file?path=blob&format=text")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.bytes().await.unwrap().len(), 4);
}

#[tokio::test]
async fn batch_upload_with_paths_and_with_filenames() {
    let server = Server::start();
    let form = reqwest::multipart::Form::new()
        .text("paths", "one/a.txt")
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"AAA".to_vec()).file_name("a.txt"),
        )
        .text("paths", "two/b.bin")
        .part(
            "files",
            reqwest::multipart::Part::bytes(vec![0u8, 1, 2]).file_name("b.bin"),
        );
    let placed: Value = server
        .post("/workspace/files:batch")
        .multipart(form)
        .fetch_json()
        .await;
    assert_eq!(placed.as_array().unwrap().len(), 2);
    assert_eq!(placed[1]["path"], server.ws("two/b.bin").to_str().unwrap());
    assert_eq!(std::fs::read(server.ws("one/a.txt")).unwrap(), b"AAA");
    assert_eq!(std::fs::read(server.ws("two/b.bin")).unwrap(), [0, 1, 2]);

    let by_name = reqwest::multipart::Form::new().part(
        "files",
        reqwest::multipart::Part::bytes(b"N".to_vec()).file_name("named.txt"),
    );
    let placed: Value = server
        .post("/workspace/files:batch")
        .multipart(by_name)
        .fetch_json()
        .await;
    assert_eq!(placed[0]["name"], "named.txt");

    let mismatched = reqwest::multipart::Form::new()
        .text("paths", "p1")
        .text("paths", "p2")
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"1".to_vec()).file_name("f"),
        );
    let response = server
        .post("/workspace/files:batch")
        .multipart(mismatched)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);

    let escaping = reqwest::multipart::Form::new()
        .text("paths", "ok.txt")
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"1".to_vec()).file_name("f"),
        )
        .text("paths", "../escape.txt")
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"2".to_vec()).file_name("g"),
        );
    let response = server
        .post("/workspace/files:batch")
        .multipart(escaping)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    assert!(
        !server.ws("ok.txt").exists(),
        "a refused batch must place nothing"
    );
    assert!(
        !server
            .workspace
            .parent()
            .unwrap()
            .join("escape.txt")
            .exists()
    );
}

#[tokio::test]
async fn an_unsatisfiable_range_names_the_length() {
    let server = Server::start_with(&["--tools", "filesystem,workspace,watch"]);
    std::fs::write(server.ws("ten.bin"), b"0123456789").unwrap();
    for range in ["bytes=10-", "bytes=-0", "bytes=20-30"] {
        let response = server
            .get("/workspace/file?path=ten.bin")
            .header("Range", range)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 416, "{range}");
        assert_eq!(
            response
                .headers()
                .get("content-range")
                .map(|value| value.to_str().unwrap()),
            Some("bytes */10"),
            "{range}"
        );
    }
}

/// The workspace's direct entries, names only.
fn workspace_names(server: &Server) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&server.workspace)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Waits (bounded) until boxd holds a descriptor on something inside the workspace: the staging file.
async fn wait_for_staging_descriptor(server: &Server) -> String {
    let fds = format!("/proc/{}/fd", server.pid());
    let prefix = format!("{}/", server.workspace.display());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let held = std::fs::read_dir(&fds)
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .map(|target| target.to_string_lossy().into_owned())
            .find(|target| target.starts_with(&prefix));
        if let Some(held) = held {
            return held;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "boxd never opened a staging file"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_upload_in_progress_is_invisible_and_a_killed_server_leaves_nothing() {
    let mut server = Server::start_with(&["--tools", "filesystem,workspace,watch"]);
    let (chunks, received) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body = futures_util::stream::unfold(received, |mut received| async move {
        received.recv().await.map(|chunk| (chunk, received))
    });
    let upload = server
        .put("/workspace/file?path=big/upload.bin")
        .body(reqwest::Body::wrap_stream(body))
        .send();
    let upload = tokio::spawn(upload);
    chunks.send(Ok(vec![b'x'; 1024 * 1024])).await.unwrap();
    let held = wait_for_staging_descriptor(&server).await;
    assert_eq!(
        workspace_names(&server),
        ["big"],
        "a staging file is visible while the upload runs (boxd holds {held})"
    );
    assert!(
        std::fs::read_dir(server.ws("big"))
            .unwrap()
            .next()
            .is_none(),
        "a staging file is visible while the upload runs (boxd holds {held})"
    );

    // SAFETY: plain kill(2) on our own child.
    unsafe {
        libc::kill(server.pid() as i32, libc::SIGKILL);
    }
    assert!(server.terminate().is_some(), "boxd did not die");
    drop(chunks);
    let _ = upload.await;
    assert_eq!(workspace_names(&server), ["big"]);
    assert!(
        std::fs::read_dir(server.ws("big"))
            .unwrap()
            .next()
            .is_none()
    );
}

#[tokio::test]
async fn batch_paths_fields_are_capped() {
    let server = Server::start_with(&["--tools", "filesystem,workspace,watch"]);
    let form = reqwest::multipart::Form::new()
        .text("paths", "a".repeat(1024 * 1024 + 1))
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"1".to_vec()).file_name("f"),
        );
    let response = server
        .post("/workspace/files:batch")
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    assert!(workspace_names(&server).is_empty());
}

/// Sets an entry's mtime (a link's own), to the nanosecond.
fn set_mtime(path: &std::path::Path, seconds: i64, nanos: i64) {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let times = [libc::timespec {
        tv_sec: seconds,
        tv_nsec: nanos,
    }; 2];
    // SAFETY: `c_path` is NUL-terminated and `times` holds two valid timespecs.
    let done = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(done, 0, "utimensat {}", path.display());
}

/// A listing's answer, byte for byte, on a directory of every kind of entry: order (bytes, not
/// locale), escapes, a name that is not UTF-8, links as links (in, out, dangling, to a directory, never
/// entered), a FIFO, sizes only for files, mtimes before the epoch, staging files left out, depth.
#[tokio::test]
async fn listing_answers_byte_for_byte() {
    use std::os::unix::ffi::OsStrExt;
    let server = Server::start();
    let mixed = server.ws("mixed");
    std::fs::create_dir_all(mixed.join("a dir/deeper")).unwrap();
    std::fs::write(mixed.join("a dir/deeper/x"), "").unwrap();
    std::fs::write(mixed.join("a dir/inner.bin"), [0u8; 1234]).unwrap();
    std::fs::write(mixed.join("b.txt"), "hello").unwrap();
    std::fs::write(mixed.join("Zupper"), "z").unwrap();
    std::fs::write(mixed.join(".hidden"), "h").unwrap();
    std::fs::write(mixed.join(".boxd-upload-abc.tmp"), "staging").unwrap();
    std::fs::write(mixed.join(".boxd-upload-abc.tmpx"), "not staging").unwrap();
    std::fs::write(mixed.join("quo\"te\\and\ttab\u{e9}\u{1F600}"), "q").unwrap();
    std::fs::write(mixed.join(std::ffi::OsStr::from_bytes(b"bad\xffname")), "b").unwrap();
    symlink("b.txt", mixed.join("link-in")).unwrap();
    symlink("a dir", mixed.join("link-dir")).unwrap();
    symlink("/etc", mixed.join("link-out")).unwrap();
    symlink("nowhere", mixed.join("dangling")).unwrap();
    let fifo = std::ffi::CString::new(mixed.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: `fifo` is NUL-terminated.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    for entry in [
        "a dir/deeper/x",
        "a dir/deeper",
        "a dir/inner.bin",
        "a dir",
        ".hidden",
        ".boxd-upload-abc.tmpx",
        "quo\"te\\and\ttab\u{e9}\u{1F600}",
        "link-in",
        "link-dir",
        "link-out",
        "dangling",
        "fifo",
    ] {
        set_mtime(&mixed.join(entry), 1_700_000_000, 123_456_789);
    }
    set_mtime(
        &mixed.join(std::ffi::OsStr::from_bytes(b"bad\xffname")),
        1_700_000_000,
        999_999_999,
    );
    set_mtime(&mixed.join("b.txt"), -2, 500_000_000);
    set_mtime(&mixed.join("Zupper"), -1, 999_999_999);

    let root = server.ws("mixed").display().to_string();
    let entry = |path: &str, kind: &str, size: Option<u64>, mtime_ms: i64| {
        let name = path.rsplit('/').next().unwrap();
        let size = size.map_or("null".to_owned(), |size| size.to_string());
        format!(
            r#"{{"path":{},"name":{},"type":"{kind}","size":{size},"mtime_ms":{mtime_ms}}}"#,
            serde_json::to_string(&format!("{root}/{path}")).unwrap(),
            serde_json::to_string(name).unwrap(),
        )
    };
    let at = 1_700_000_000_123;
    let top = |deep: bool| {
        let mut entries = vec![
            entry(".boxd-upload-abc.tmpx", "file", Some(11), at),
            entry(".hidden", "file", Some(1), at),
            entry("Zupper", "file", Some(1), 0),
            entry("a dir", "dir", None, at),
        ];
        if deep {
            entries.push(entry("a dir/deeper", "dir", None, at));
            entries.push(entry("a dir/inner.bin", "file", Some(1234), at));
        }
        entries.extend([
            entry("b.txt", "file", Some(5), -1_500),
            entry("bad\u{FFFD}name", "file", Some(1), 1_700_000_000_999),
            entry("dangling", "symlink", None, at),
            entry("fifo", "other", None, at),
            entry("link-dir", "symlink", None, at),
            entry("link-in", "symlink", None, at),
            entry("link-out", "symlink", None, at),
            entry("quo\"te\\and\ttab\u{e9}\u{1F600}", "file", Some(1), at),
        ]);
        format!("[{}]", entries.join(","))
    };
    for (query, expected) in [
        ("mixed", top(false)),
        ("mixed&depth=2", top(true)),
        (
            "mixed/a%20dir&depth=1",
            format!(
                "[{},{}]",
                entry("a dir/deeper", "dir", None, at),
                entry("a dir/inner.bin", "file", Some(1234), at)
            ),
        ),
        (
            "mixed/a%20dir/deeper&depth=3",
            format!("[{}]", entry("a dir/deeper/x", "file", Some(0), at)),
        ),
    ] {
        let response = server
            .get(&format!("/workspace/list?path={query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{query}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{query}"
        );
        assert_eq!(response.text().await.unwrap(), expected, "{query}");
    }
    std::fs::create_dir(server.ws("empty")).unwrap();
    let empty = server
        .get("/workspace/list?path=empty")
        .send()
        .await
        .unwrap();
    assert_eq!(empty.text().await.unwrap(), "[]");
}
