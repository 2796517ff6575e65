//! Waiting for what an action set off: the tab's event marks, waits on them bounded by a deadline,
//! racing an action against a dialog, and settling (a navigation to commit, the DOM to go quiet), with
//! the script every document gets so a settle after `load` can tell at once that nothing moved.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::events::TabEvents;
use super::{Ahead, Running};
use crate::tools::ToolError;

/// How long an action waits for the page to settle: a started navigation to commit and the DOM to be
/// quiet for [`QUIET`].
pub const SETTLE_CAP: Duration = Duration::from_secs(3);
/// The DOM is settled when it has not changed for this long.
const QUIET: Duration = Duration::from_millis(100);
/// DOM changes this long before an action count as its own (the page's clock and boxd's are read a
/// round trip apart).
const ACTION_SLACK: Duration = Duration::from_millis(5);
/// The look that tells an action set nothing off; past it, the ordinary settle decides.
const UNCHANGED_LOOK_TIMEOUT: Duration = Duration::from_secs(1);
/// Installed in every document before its scripts run: the time of the last DOM change since the
/// document finished loading (0: none), so a settle after the load event can tell at once that nothing
/// moved, instead of waiting out a quiet window, and the time of the last navigation the page started
/// (the Navigation API's `navigate`: a link, a form, a script; the browser's own report of it can come
/// after a look at the page). Changes while the parser builds the page are no sign
/// of pending work; changes after `load` (a load handler, a fetch's answer being rendered) are. It sits
/// on the page's window under a registered symbol, not enumerable, so page code does not trip on it.
pub(super) const WATCH_MUTATIONS: &str = "(() => { const key = Symbol.for('boxd.settle'); \
    if (Object.prototype.hasOwnProperty.call(window, key)) return; const state = { last: 0, navigated: 0 }; \
    Object.defineProperty(window, key, { value: state }); if (window.navigation) \
    navigation.addEventListener('navigate', () => { state.navigated = performance.now(); }); \
    new MutationObserver(() => { \
    if (document.readyState === 'complete') state.last = performance.now(); }).observe(document, \
    { subtree: true, childList: true, attributes: true, characterData: true }); })()";

#[derive(Debug, Clone, Copy)]
pub struct Marks {
    pub navigation_requested: u64,
    pub documents: u64,
    pub dom_content_loaded: u64,
    pub stopped_loading: u64,
    pub loads: u64,
    /// The main frame was loading (a page whose load never fired still is).
    pub loading: bool,
    /// When they were taken: just before an action, so its effects can be told from what came before.
    pub taken: Instant,
}

impl Marks {
    /// The same events seen (whenever the marks were taken).
    pub fn same_events(&self, other: &Marks) -> bool {
        (
            self.navigation_requested,
            self.documents,
            self.dom_content_loaded,
            self.stopped_loading,
            self.loads,
            self.loading,
        ) == (
            other.navigation_requested,
            other.documents,
            other.dom_content_loaded,
            other.stopped_loading,
            other.loads,
            other.loading,
        )
    }
}

impl Running {
    pub fn marks(&self) -> Result<Marks, ToolError> {
        self.events(|events| Marks {
            navigation_requested: events.navigation_requested,
            documents: events.documents,
            dom_content_loaded: events.dom_content_loaded,
            stopped_loading: events.stopped_loading,
            loads: events.loads,
            loading: events.loading,
            taken: Instant::now(),
        })
    }

    /// Waits until `done` holds for the current tab's events, a dialog opens, the browser goes away,
    /// or `deadline`; true unless the deadline passed.
    pub async fn wait_until(
        &self,
        deadline: Instant,
        done: impl Fn(&TabEvents) -> bool,
    ) -> Result<bool, ToolError> {
        let session = self.tab()?.session.clone();
        let cdp = self.cdp();
        let mut changes = cdp.events.subscribe();
        loop {
            let satisfied = cdp.events.with(&session, |events| {
                done(events) || events.dialog.is_some() || events.crashed
            });
            if satisfied || cdp.is_closed() {
                return Ok(true);
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Ok(true),
                Err(_) => return Ok(false),
            }
        }
    }

    /// Evaluates `expression`, a promise, in the page's session and waits for its value (within
    /// `timeout`), unless a dialog opens first (`None`).
    pub(super) async fn evaluate_promise(
        &self,
        session: &str,
        expression: &str,
        timeout: Duration,
    ) -> Result<Option<Value>, ToolError> {
        self.racing(async {
            self.cdp()
                .call(
                    Some(session),
                    "Runtime.evaluate",
                    json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
                    timeout,
                )
                .await
                .map_err(ToolError::from)
        })
        .await
    }

    /// Runs `action` unless a dialog opens first (the page is then blocked, and so may the action's
    /// answer be); `None` when the dialog won.
    pub async fn racing<T>(
        &self,
        action: impl std::future::Future<Output = Result<T, ToolError>>,
    ) -> Result<Option<T>, ToolError> {
        let forever = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            outcome = action => outcome.map(Some),
            _ = self.wait_until(forever, |events| events.dialog.is_some()) => Ok(None),
        }
    }

    /// Waits for what an action set off: nothing when it set nothing off (no navigation, no request,
    /// no change of the DOM: answered at once), else a navigation it started to commit (its
    /// DOMContentLoaded), then the DOM to be quiet for [`QUIET`]; all within [`SETTLE_CAP`], and never
    /// past a dialog.
    pub async fn settle(&self, before: Marks) -> Result<(), ToolError> {
        if self.unchanged_since(before).await? {
            return Ok(());
        }
        self.settle_until(before, Instant::now() + SETTLE_CAP).await
    }

    /// Whether the action taken right after `before` set nothing off, looked at once its page's
    /// handlers ran (one task's hop, a message rather than a timer, which a paced page may hold back
    /// for a frame: the handlers' promises and the tasks they queued run first): the page was
    /// loaded and still is, no navigation was asked for (by the browser's report or the page's own
    /// `navigate` event: a link to a download too), no request is in flight (the renderer reports
    /// one a handler started before it answers the look), and the DOM did not change since the action
    /// (nor within [`ACTION_SLACK`] before it). False, and the ordinary settle decides, on any doubt.
    async fn unchanged_since(&self, before: Marks) -> Result<bool, ToolError> {
        let calm = |running: &Running| -> Result<bool, ToolError> {
            let now = running.marks()?;
            running.events(|events| {
                !before.loading
                    && !events.loading
                    && events.in_flight.is_empty()
                    && events.dialog.is_none()
                    && !events.crashed
                    && now.navigation_requested == before.navigation_requested
                    && now.documents == before.documents
            })
        };
        if !calm(self)? || self.cdp().is_closed() {
            return Ok(false);
        }
        let session = self.tab()?.session.clone();
        let since = (before.taken.elapsed() + ACTION_SLACK).as_millis();
        let look = format!(
            "new Promise(resolve => {{ const action = performance.now() - {since}; \
             const hop = new MessageChannel(); hop.port1.onmessage = () => {{ hop.port1.close(); \
             const state = window[Symbol.for('boxd.settle')]; resolve(!!state && \
             document.readyState === 'complete' && state.last < action && \
             !(state.navigated >= action)); }}; \
             hop.port2.postMessage(0); }})"
        );
        let looked = self
            .evaluate_promise(&session, &look, UNCHANGED_LOOK_TIMEOUT)
            .await;
        let unchanged = matches!(&looked, Ok(Some(answer))
            if answer.pointer("/result/value") == Some(&Value::Bool(true)));
        Ok(unchanged && calm(self)?)
    }

    /// [`Running::settle`] within a deadline given by the caller (a navigation's whole wait shares
    /// one cap).
    async fn settle_until(&self, before: Marks, deadline: Instant) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        for _ in 0..3 {
            let now = self.marks()?;
            let (loading, blocked) =
                self.events(|e| (e.loading, e.dialog.is_some() || e.crashed))?;
            if blocked || self.cdp().is_closed() {
                return Ok(());
            }
            // A load under way before the action (an image that never arrives) is not one it started.
            let navigating = (loading && !before.loading)
                || now.navigation_requested != before.navigation_requested;
            if navigating {
                let committed = self
                    .wait_until(deadline, |events| {
                        events.dom_content_loaded != before.dom_content_loaded
                            || (!events.loading && events.stopped_loading != before.stopped_loading)
                    })
                    .await?;
                if !committed {
                    return Ok(());
                }
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Ok(());
            }
            let quiet = format!(
                "new Promise(resolve => {{ let timer; const done = () => {{ observer.disconnect(); \
                 clearTimeout(cap); resolve(true); }}; const observer = new MutationObserver(() => \
                 {{ clearTimeout(timer); timer = setTimeout(done, {quiet}); }}); \
                 observer.observe(document, {{subtree: true, childList: true, attributes: true, \
                 characterData: true}}); timer = setTimeout(done, {quiet}); const cap = \
                 setTimeout(done, {cap}); }})",
                quiet = QUIET.as_millis(),
                cap = remaining.as_millis()
            );
            match self
                .evaluate_promise(&session, &quiet, remaining + Duration::from_millis(200))
                .await
            {
                // The document went away under the observer: a navigation; wait for it above.
                Ok(Some(answer)) if answer.get("exceptionDetails").is_some() => continue,
                Ok(_) => {
                    let after = self.marks()?;
                    let started = (after.loading && !now.loading)
                        || after.navigation_requested != now.navigation_requested;
                    if !started {
                        return Ok(());
                    }
                }
                Err(_) if !self.cdp().is_closed() => continue,
                Err(failure) => return Err(failure),
            }
        }
        Ok(())
    }
}

impl Running {
    /// Settles a page whose load event has fired (or whose wait for it hit the cap) by `deadline`,
    /// the cap its navigation started (waits never stack past it): done as soon as
    /// no request is in flight and the DOM has not changed since `load` (or not for [`QUIET`]); a
    /// page that keeps changing, or starts another navigation, is waited for as [`Running::settle`]
    /// waits. No quiet window is waited out when nothing is pending: a static page settles in one
    /// round trip.
    pub async fn settle_loaded(
        &mut self,
        before: Marks,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        let requests_pending = !self.events(|events| events.in_flight.is_empty())?;
        if requests_pending {
            self.wait_until(deadline, |events| events.in_flight.is_empty())
                .await?;
        }
        let (blocked, navigating) = self.events(|events| {
            (
                events.dialog.is_some() || events.crashed,
                events.loading || events.navigation_requested != before.navigation_requested,
            )
        })?;
        if blocked || self.cdp().is_closed() {
            return Ok(());
        }
        if navigating {
            return self.settle_until(before, deadline).await;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Ok(());
        }
        // One task's hop first when requests just finished, so the page's handlers of their answers
        // have run (and changed the DOM) before it is judged quiet. Without the watcher (a document
        // boxd attached to late), the quiet window is waited out from now.
        let check = format!(
            "new Promise(resolve => {{ const state = window[Symbol.for('boxd.settle')]; \
             const started = performance.now(); const look = () => {{ const now = performance.now(); \
             const last = state ? state.last : started; const quiet = now - last; \
             if ((state && last === 0) || quiet >= {quiet} || now - started >= {cap}) \
             return resolve(first ? 'at once' : true); first = false; \
             setTimeout(look, Math.min({quiet} - quiet, {cap} - (now - started)) + 1); }}; \
             let first = !{hop}; if ({hop}) setTimeout(look, 0); else look(); }})",
            quiet = QUIET.as_millis(),
            cap = remaining.as_millis(),
            hop = requests_pending,
        );
        let checked =
            self.evaluate_promise(&session, &check, remaining + Duration::from_millis(200));
        // A page found settled at its first look is what the answer shows: its location and snapshot
        // are asked for right behind the check (the renderer takes them in order), saving two round
        // trips; otherwise they are dropped and asked for again once the page is done.
        let (checked, ahead) = if requests_pending {
            (checked.await, None)
        } else {
            let ahead = self.racing(self.location_and_snapshot_parts());
            let (checked, ahead) = futures_util::future::join(checked, ahead).await;
            (checked, ahead.ok().flatten())
        };
        let at_once = matches!(&checked, Ok(Some(answer))
            if answer.pointer("/result/value").and_then(Value::as_str) == Some("at once"));
        match checked {
            Ok(Some(answer)) if answer.get("exceptionDetails").is_none() => {}
            // The document went away under the check (a navigation), or the check failed: the
            // ordinary settle tells when the page is done.
            Ok(Some(_)) => return self.settle_until(before, deadline).await,
            Ok(None) => return Ok(()),
            Err(_) if !self.cdp().is_closed() => return self.settle_until(before, deadline).await,
            Err(failure) => return Err(failure),
        }
        let started = self.events(|events| {
            events.loading || events.navigation_requested != before.navigation_requested
        })?;
        if started {
            return self.settle_until(before, deadline).await;
        }
        if at_once && let Some((location, parts)) = ahead {
            self.ahead = Some(Ahead {
                session,
                marks: self.marks()?,
                location,
                parts,
            });
        }
        Ok(())
    }
}
