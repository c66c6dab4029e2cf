//! `GET /jobs/bulk`: the outcome of a bulk action, after its POST redirected
//! here (Post/Redirect/Get): reloading the page, or going back to it, shows
//! the outcome again and never runs the action again.
//!
//! The outcome travels in the query string, as structured fields only (counts,
//! each refused job with a code for its reason, the filter as any `/jobs` link
//! carries it), never as a message: a link someone else made can put no
//! sentence of its own on the dashboard, only counts and a filter. What
//! stopped an action partway is named by kind; its full reason is in the audit
//! log. At most [`MAX_LISTED`] refusals are listed, so the address stays short
//! enough for any proxy.

use std::sync::Arc;

use axum::{
    extract::State,
    http::{StatusCode, Uri},
    response::Response,
};
use lq_core::{control::BulkReport, Error, JobState};
use maud::{html, Markup};

use crate::{
    actions::see_other,
    bulk::Action,
    context::Ctx,
    error::PageError,
    layout,
    params::{self, Filter, Pairs},
    Shared,
};

/// Most refusals the result's address lists (each about 25 bytes).
const MAX_LISTED: usize = 100;

/// Which jobs an action was asked to act on.
pub(crate) enum Scope<'a> {
    /// Jobs picked in the list, on the tab of this state (if one).
    Selected(Option<JobState>),
    /// Every job this filter matched, ids up to `upto`.
    Matching(&'a Filter, i64),
}

/// The 303 to the page showing the outcome of `action` on `scope`: `r`, and
/// for an action that stopped partway, the status of what stopped it.
pub(crate) fn redirect(
    ctx: &Ctx,
    action: Action,
    scope: &Scope<'_>,
    r: &BulkReport,
    stopped: Option<StatusCode>,
) -> Response {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("did", action.verb());
    match scope {
        Scope::Selected(shown) => {
            q.append_pair("selected", "1");
            if let Some(s) = shown {
                q.append_pair("state", s.as_str());
            }
        }
        Scope::Matching(filter, upto) => {
            for (k, v) in filter.fields() {
                q.append_pair(k, &v);
            }
            q.append_pair("upto", &upto.to_string());
        }
    }
    q.append_pair("matched", &r.matched.to_string());
    q.append_pair("done", &r.done.len().to_string());
    for (id, why) in r.refused.iter().take(MAX_LISTED) {
        q.append_pair("r", &format!("{id}.{}", code(why)));
    }
    if r.refused.len() > MAX_LISTED {
        q.append_pair("more", &(r.refused.len() - MAX_LISTED).to_string());
    }
    if let Some(status) = stopped {
        q.append_pair("stopped", status.as_str());
    }
    see_other(&format!("{}?{}", ctx.url("/jobs/bulk"), q.finish()))
}

/// A refusal's reason as a short code: `gone`, `left.queued`,
/// `state.running`, `key.<holder>`, `twice.<live>.<finished>`, or `other`.
fn code(e: &Error) -> String {
    match e {
        Error::NotFound { .. } => "gone".to_owned(),
        Error::LeftFilter { state, .. } => format!("left.{state}"),
        Error::WrongState { state, .. } => format!("state.{state}"),
        Error::UniqueKeyHeld { holder, .. } => format!("key.{holder}"),
        Error::AmbiguousId { live, finished, .. } => format!("twice.{live}.{finished}"),
        _ => "other".to_owned(),
    }
}

/// A refusal read back from its code.
enum Refusal {
    /// One of lq-core's own refusals, shown by its message.
    Core(Error),
    /// Its unique key is held by live job `holder` (the key itself is not
    /// carried in the address).
    KeyHeld { holder: i64 },
    /// Some other reason (see the audit log).
    Other,
}

fn decode(entry: &str, action: Action) -> Option<(i64, Refusal)> {
    let (id, code) = entry.split_once('.')?;
    let id: i64 = id.parse().ok()?;
    let state = |s: &str| params::parse_state(s).ok();
    let action = action.done();
    let mut parts = code.split('.');
    let why = match (parts.next()?, parts.next(), parts.next()) {
        ("gone", None, None) => Refusal::Core(Error::NotFound { id }),
        ("left", Some(s), None) => Refusal::Core(Error::LeftFilter {
            id,
            state: state(s)?,
            action,
        }),
        ("state", Some(s), None) => Refusal::Core(Error::WrongState {
            id,
            state: state(s)?,
            action,
        }),
        ("key", Some(h), None) => Refusal::KeyHeld {
            holder: h.parse().ok()?,
        },
        ("twice", Some(l), Some(f)) => Refusal::Core(Error::AmbiguousId {
            id,
            live: state(l)?,
            finished: state(f)?,
        }),
        _ => Refusal::Other,
    };
    Some((id, why))
}

/// `GET /jobs/bulk`.
pub(crate) async fn page(ctx: Ctx, State(sh): State<Arc<Shared>>, uri: Uri) -> Response {
    let q = Pairs::from_query(&uri);
    if q.get("did").is_none() {
        // Nothing to show: a bulk action starts on the jobs page.
        return see_other(&ctx.url("/jobs"));
    }
    // A result does not change: the page is not fetched again.
    let ctx = Ctx {
        refresh: None,
        ..ctx
    };
    match body(&ctx, &q, sh.config.redact.is_some()) {
        Ok((status, markup)) => ctx.page_with(status, "Bulk action", markup),
        Err(e) => ctx.error(e),
    }
}

fn body(ctx: &Ctx, q: &Pairs, redacted: bool) -> Result<(StatusCode, Markup), PageError> {
    let bad = |e: params::ParamError| PageError::bad_request(e.to_string());
    let action = Action::parse(q.get("did"))?;
    let count = |field: &'static str| {
        q.get(field)
            .map_or(Ok(0), |v| params::parse_count(field, v))
            .map_err(bad)
    };
    let (matched, done, more) = (count("matched")?, count("done")?, count("more")?);
    let (what, back) = if q.get("selected") == Some("1") {
        let shown = q
            .get("state")
            .map(params::parse_state)
            .transpose()
            .map_err(bad)?;
        match shown {
            Some(s) => (
                format!("the selected {s} jobs"),
                format!("{}?state={s}", ctx.url("/jobs")),
            ),
            None => ("the selected jobs".to_owned(), ctx.url("/jobs")),
        }
    } else {
        let filter = Filter::parse(q, redacted).map_err(bad)?;
        (
            format!("jobs matching {}", filter.describe()),
            format!("{}?{}", ctx.url("/jobs"), filter.query(&[])),
        )
    };
    let refused: Vec<(i64, Refusal)> = q.all("r").filter_map(|e| decode(e, action)).collect();
    let line = format!(
        "{} {} of {} {what}",
        action.past(),
        layout::count(done),
        layout::count(matched)
    );
    let listed = report(ctx, action, &refused, more, &back);
    // Only the statuses an action can stop with: a hand-made link cannot make
    // the page blank (204, 304) or an upgrade (101).
    let stopped = q.get("stopped").map(|s| match s {
        "403" => StatusCode::FORBIDDEN,
        "409" => StatusCode::CONFLICT,
        "503" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    });
    let Some(status) = stopped else {
        return Ok((
            StatusCode::OK,
            html! {
                h1 #bulk-result { (line) }
                (listed)
            },
        ));
    };
    let why = match status {
        StatusCode::SERVICE_UNAVAILABLE => {
            "the database did not answer in time, or is unavailable: try again"
        }
        StatusCode::FORBIDDEN => {
            "the database refused it (the dashboard's database role lacks a grant, \
             or the database is read-only; docs/roles.md lists the operator's grants)"
        }
        StatusCode::CONFLICT => "a job's state did not allow it",
        _ => "it failed",
    };
    let title = status.canonical_reason().unwrap_or("Error");
    Ok((
        status,
        html! {
            h1 { (title) }
            p.error-message role="alert" {
                "bulk action stopped partway: " (layout::count(done)) " jobs were already "
                (action.done()) " and stay so; the jobs not yet reached are unchanged. "
                "What stopped it: " (why) " (the full reason is in the audit log, lq_web::audit). "
                "Running the action again takes up the rest."
            }
            h2 #bulk-result { (line) " before it stopped" }
            (listed)
        },
    ))
}

/// Each refusal with its reason, and a way back.
fn report(ctx: &Ctx, action: Action, refused: &[(i64, Refusal)], more: u64, back: &str) -> Markup {
    let job = |id: i64| html! { a href=(ctx.url(&format!("/jobs/{id}"))) { (id) } };
    let total = refused.len() as u64 + more;
    html! {
        @if total == 0 {
            p { "None refused." }
        } @else {
            h2 { (layout::count(total)) " refused" }
            table.refused {
                thead { tr { th.num { "job" } th { "reason" } } }
                tbody {
                    @for (id, why) in refused {
                        tr {
                            td.num { (job(*id)) }
                            td {
                                @match why {
                                    Refusal::Core(e) => (lq_core::chain(e)),
                                    Refusal::KeyHeld { holder } => {
                                        "job " (id) " cannot be " (action.done()) ": live job "
                                        (holder) " holds its unique key"
                                    }
                                    Refusal::Other => "refused (the reason is in the audit log)",
                                }
                            }
                        }
                    }
                }
            }
            @if more > 0 {
                p { "And " (layout::count(more)) " more refused, not listed here." }
            }
        }
        p { a href=(back) { "Back to the jobs" } }
    }
}
