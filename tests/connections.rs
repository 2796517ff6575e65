//! Connection handling under hostile clients (issue #15 finding 4): idle connections past the fd
//! limit, slow request heads, idle keep-alive connections, and the fd limit boxd raises at start.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use common::{Server, TOKEN};

/// Starts boxd (shell and workspace families only: few descriptors of its own) with `RLIMIT_NOFILE`
/// set to `soft`/`hard` and the given extra environment.
fn start_limited(soft: u64, hard: u64, env: &[(&str, &str)]) -> Server {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    Server::start_prepared(&["--tools", "shell,workspace"], move |command| {
        command.envs(env);
        // SAFETY: only setrlimit(2), async-signal-safe, between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    })
}

fn address(server: &Server) -> SocketAddr {
    server
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("boxd's address")
}

/// One request on a fresh connection; the status and body, or why there was none within `wait`.
fn request(address: SocketAddr, path: &str, wait: Duration) -> Result<(u16, String), String> {
    let mut stream =
        TcpStream::connect_timeout(&address, wait).map_err(|err| format!("connect: {err}"))?;
    stream
        .set_read_timeout(Some(wait))
        .map_err(|err| err.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: boxd\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|err| format!("write: {err}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|err| format!("read: {err}"))?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| format!("no status line in {answer:?}"))?;
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Reads until the peer closes; how long that took, or an error if it did not within `wait`.
fn closed_within(stream: &mut TcpStream, wait: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(wait))
        .map_err(|err| err.to_string())?;
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return Ok(started.elapsed()),
            Ok(_) if started.elapsed() < wait => continue,
            Ok(_) => return Err("still sending".into()),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok(started.elapsed());
            }
            Err(err) => return Err(format!("not closed after {:?}: {err}", started.elapsed())),
        }
    }
}

#[test]
fn idle_connections_past_the_fd_limit_leave_health_checks_answered() {
    // 256 descriptors: the cap is 64 connections, then 64 that only answer probes.
    let server = start_limited(256, 256, &[]);
    let address = address(&server);
    let mut idle = Vec::new();
    for _ in 0..400 {
        // Connections boxd closes at once still count: they were opened, as an attacker's would be.
        if let Ok(stream) = TcpStream::connect_timeout(&address, Duration::from_secs(2)) {
            idle.push(stream);
        }
    }
    assert!(idle.len() > 256, "only {} connections opened", idle.len());

    for path in ["/healthz", "/fastapi/healthz", "/livez"] {
        let answer = request(address, path, Duration::from_secs(5));
        assert_eq!(
            answer.as_ref().map(|(status, _)| *status),
            Ok(200),
            "{path} while 400 idle connections are open: {answer:?}"
        );
    }
    let refused = request(address, "/workspace/exists?path=a", Duration::from_secs(5));
    let (status, body) = refused.expect("an answer past the cap");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("limit of 64 connections"), "{body}");

    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match request(address, "/workspace/exists?path=a", Duration::from_secs(5)) {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "not served again after the idle connections closed: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn slow_request_heads_and_idle_keep_alive_connections_are_closed() {
    let server = start_limited(1024, 1024, &[("BOXD_HEADER_TIMEOUT", "1")]);
    let address = address(&server);

    let mut slow = TcpStream::connect(address).expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: boxd\r\n")
        .expect("half a request head");
    let took = closed_within(&mut slow, Duration::from_secs(10)).expect("a slow head is closed");
    assert!(took < Duration::from_secs(5), "closed only after {took:?}");

    let mut idle = TcpStream::connect(address).expect("connect");
    write!(
        idle,
        "GET /healthz HTTP/1.1\r\nHost: boxd\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    .expect("a request");
    idle.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    for _ in 0..100 {
        let read = idle.read(&mut buffer).expect("the answer");
        assert!(read > 0, "closed before answering");
        answer.extend_from_slice(&buffer[..read]);
        if answer.ends_with(b"\r\n\r\nOK") {
            break;
        }
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    let took = closed_within(&mut idle, Duration::from_secs(10))
        .expect("an idle keep-alive connection is closed");
    assert!(took < Duration::from_secs(5), "closed only after {took:?}");
}

#[test]
fn the_soft_fd_limit_is_raised_to_the_hard_limit() {
    let server = start_limited(256, 2048, &[]);
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).expect("boxd's limits");
    let open_files = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("the open files line");
    let soft: Vec<&str> = open_files.split_whitespace().skip(3).take(2).collect();
    assert_eq!(soft, ["2048", "2048"], "{open_files}");
}
