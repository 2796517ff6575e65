//! Every bound boxd keeps on what a request, a client or a child can make it do, in one table. Each value
//! is defined where it is enforced and only named here (the runtime's own two, which `main` applies, are
//! defined here), so the table cannot drift from the code; the
//! README's "Limits" table is this table (`boxd limits` prints it, and a test compares the two).

use crate::cli::ServeArgs;
use crate::family::limits::{Limit, as_u64, bytes, count, flag_seconds, seconds};

/// How long in-flight requests may finish after SIGTERM before boxd exits anyway.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// Threads of the runtime's blocking pool (file I/O, path resolution, git), at most; more blocking work
/// queues for a thread instead of adding one. Tokio's default, 512, let a load burst grow boxd to
/// hundreds of threads.
pub const MAX_BLOCKING_THREADS: usize = 64;

/// The table for the configuration `args` describes.
pub fn table(args: &ServeArgs) -> Vec<Limit> {
    let mut rows = vec![
        Limit::new(
            "connections",
            "connections served at once",
            format!(
                "half the file-descriptor limit less {}, at most {}",
                crate::http::serve::OVERFLOW_CONNECTIONS,
                crate::http::serve::MAX_CONNECTIONS
            ),
            "64 more connections answer only `/livez`, `/healthz`, `/readyz/status`; anything else 503 + `Retry-After`",
        ),
        Limit::new(
            "connections",
            "time to send a request's headers, and idle time between requests",
            flag_seconds(args.header_timeout, "--header-timeout"),
            "the connection is closed",
        ),
        Limit::new(
            "requests",
            "a request body's silence; its average rate once that long has passed",
            format!(
                "{}; {} bytes/s (`--body-min-rate`)",
                flag_seconds(args.body_idle_timeout, "--body-idle-timeout"),
                args.body_min_rate
            ),
            "the body is cut and the request fails (4xx); the connection is closed",
        ),
        Limit::new(
            "requests",
            "JSON body",
            bytes(as_u64(crate::http::MAX_JSON_BODY)),
            "413",
        ),
        Limit::new(
            "requests",
            "any `timeout` argument",
            seconds(crate::core::deadline::MAX_TIMEOUT),
            "400 naming the bound",
        ),
        Limit::new(
            "requests",
            "progress events buffered for a slow stream reader",
            format!("{} events", crate::tools::PROGRESS_CAPACITY),
            "later events dropped, then one `dropped` event with the count; the result is whole",
        ),
        Limit::new(
            "requests",
            "wait for a family that is still starting",
            seconds(crate::core::health::WAIT_FOR_START),
            "503 + `Retry-After` with the family's state",
        ),
        Limit::new(
            "requests",
            "`GET /memory`: readings at once; the wait for a place",
            format!(
                "{}; {}",
                count(crate::http::MEMORY_READINGS),
                seconds(crate::http::MEMORY_READING_WAIT)
            ),
            "429 + `Retry-After`",
        ),
        Limit::new(
            "requests",
            "`GET /memory`: `/proc` entries read; processes measured; time",
            format!(
                "{}; {}; {}",
                count(crate::core::footprint::MAX_SCANNED),
                count(crate::core::footprint::MAX_MEASURED),
                seconds(crate::core::footprint::MEASURE_BUDGET)
            ),
            "the rest is left out and the answer says `partial: true`",
        ),
        Limit::new(
            "shell, ipython",
            "output kept per stream (stdout, stderr) of a command or a cell",
            format!("{} (`--max-output`)", bytes(as_u64(args.max_output))),
            "the first and last halves kept, with `[boxd: output truncated, N bytes omitted]` between; nothing on disk",
        ),
    ];
    for family in crate::cli::FAMILIES {
        rows.extend((family.limits)(args));
    }
    rows.extend([
        Limit::new(
            "pool mode",
            "`POST /init`: body; session token; env for children",
            format!(
                "{}; {} to {} bytes; {} in all",
                bytes(as_u64(crate::http::init::MAX_INIT_BODY)),
                crate::http::init::MIN_SESSION_TOKEN,
                crate::http::init::MAX_SESSION_TOKEN,
                bytes(as_u64(crate::http::init::MAX_ENV_BYTES))
            ),
            "413; 400, and the pod stays unclaimed",
        ),
        Limit::new(
            "children",
            "stderr kept from the kernel and hosted servers",
            format!(
                "the last {} lines of at most {} each",
                crate::core::child::STDERR_TAIL_LINES,
                bytes(as_u64(crate::core::child::STDERR_LINE_MAX))
            ),
            "older lines dropped; longer lines cut and marked",
        ),
        Limit::new(
            "children",
            "OOM score added to every child",
            format!("+{}", crate::core::child::CHILD_OOM_SCORE_ADJ),
            "under memory pressure the kernel kills a child before boxd",
        ),
        Limit::new(
            "runtime",
            "threads for blocking work (files, git, terminals)",
            count(MAX_BLOCKING_THREADS),
            "blocking work waits for a thread",
        ),
        Limit::new(
            "stop",
            "each family's stop; in-flight requests after SIGTERM",
            format!(
                "{}; {}",
                seconds(crate::family::STOP_BUDGET),
                seconds(SHUTDOWN_GRACE)
            ),
            "boxd goes on stopping without it",
        ),
    ]);
    rows
}

/// The table as Markdown, as the README carries it.
pub fn markdown(args: &ServeArgs) -> String {
    let mut text = String::from("| area | bound | value | past it |\n|---|---|---|---|\n");
    for limit in table(args) {
        text.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            limit.area, limit.what, limit.value, limit.past_it
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    /// docs/limits.md's table is the code's: change a bound, run `boxd limits`, paste. Read at run time,
    /// so editing the page recompiles nothing.
    #[test]
    fn the_docs_list_every_limit_as_the_code_has_it() {
        let Ok(Cli {
            command: Command::Serve(args),
        }) = Cli::try_parse_from(["boxd", "serve"])
        else {
            panic!("the defaults parse");
        };
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/limits.md");
        let page = std::fs::read_to_string(path).expect("docs/limits.md is readable");
        let table = super::markdown(&args);
        let start = page
            .find("<!-- limits:start -->\n")
            .expect("docs/limits.md has the limits markers");
        let end = page
            .find("<!-- limits:end -->")
            .expect("docs/limits.md has the limits markers");
        let listed = &page[start + "<!-- limits:start -->\n".len()..end];
        assert_eq!(
            listed, table,
            "docs/limits.md's limits differ from the code: paste `boxd limits`"
        );
    }
}
