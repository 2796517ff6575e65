//! Limits the system puts on boxd itself: a write past the file-size limit (`ulimit -f`) is an answer,
//! not a SIGXFSZ that kills boxd.

use crate::common;

use std::os::unix::process::CommandExt;

use common::Server;

const FILE_SIZE_LIMIT: libc::rlim_t = 1024 * 1024;

#[tokio::test]
async fn a_write_past_the_file_size_limit_answers_507_and_boxd_lives_on() {
    let mut server = Server::start_prepared(&[], |command| {
        // SAFETY: setrlimit in the child before exec, async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: FILE_SIZE_LIMIT,
                    rlim_max: FILE_SIZE_LIMIT,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    std::fs::write(server.ws("kept.txt"), "the old content").unwrap();
    let big = vec![b'x'; 2 * 1024 * 1024];
    let response = server
        .put("/workspace/file?path=kept.txt")
        .body(big)
        .send()
        .await
        .expect("answered, not a reset connection");
    assert_eq!(response.status(), 507);
    let detail = response.text().await.unwrap_or_default();
    assert!(detail.to_lowercase().contains("too large"), "{detail}");
    assert_eq!(server.exit_status(), None, "boxd is alive");
    assert_eq!(
        std::fs::read_to_string(server.ws("kept.txt")).unwrap(),
        "the old content",
        "the old file is intact"
    );
    let small = server
        .put("/workspace/file?path=kept.txt")
        .body("new")
        .send()
        .await
        .expect("answered");
    assert!(small.status().is_success(), "{}", small.status());
    // Children keep the default action: a command past the limit is killed by SIGXFSZ, as anywhere.
    let result = server
        .shell("head -c 2000000 /dev/zero > big.bin; echo status $?")
        .await;
    let stdout = common::item(&result, "stdout").unwrap_or_default();
    assert!(stdout.contains("status 153"), "{result}");
}

/// A body that sends nothing, or drips a byte at a time, is cut and answered; nothing is left behind.
#[tokio::test]
async fn a_body_that_stalls_or_drips_is_cut_and_answered() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start_with(&["--body-idle-timeout", "1", "--body-min-rate", "1000"]);
    let address = server.base.trim_start_matches("http://").to_string();
    for drip in [false, true] {
        let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        let (mut reader, mut writer) = stream.into_split();
        let head = format!(
            "PUT /workspace/file?path=slow-{drip}.txt HTTP/1.1\r\nHost: x\r\n\
             Authorization: Bearer {}\r\nContent-Length: 1000\r\n\r\n",
            common::TOKEN
        );
        writer.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        let dripping = tokio::spawn(async move {
            for _ in 0..40 {
                if drip && writer.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        let mut answer = vec![0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(10), reader.read(&mut answer))
            .await
            .expect("answered within 10 s")
            .unwrap_or(0);
        let answer = String::from_utf8_lossy(&answer[..read]).to_string();
        assert!(answer.starts_with("HTTP/1.1 4"), "drip {drip}: {answer}");
        assert!(
            answer.contains("body-"),
            "drip {drip}: says which bound: {answer}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "drip {drip}: {:?}",
            started.elapsed()
        );
        dripping.abort();
        assert!(!server.ws(&format!("slow-{drip}.txt")).exists());
    }
    // A body that keeps moving is not cut.
    let response = server
        .put("/workspace/file?path=fine.txt")
        .body(vec![b'y'; 4 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
}
