//! The dashboard in a real browser (Debian's headless Chromium through
//! ChromeDriver): every page under a realistic load, screenshotted into
//! `target/screenshots` to be looked at, and one operator's click flow — filter
//! the dead jobs of one kind, select everything matching, retry, confirm, see
//! them run.
//!
//! One test, its phases in order: the machine has two cores, and one browser at a
//! time is plenty.

mod chrome;
mod seed;

use std::{sync::atomic::Ordering, time::Duration};

use chrome::Browser;
use fantoccini::{Client, Locator};
use lq_tests::TestDb;
use lq_web::WebConfig;

/// Serves the dashboard (actions on, refreshing every second) on a free
/// loopback port; returns its base URL.
async fn serve(db: &TestDb) -> String {
    let app = lq_web::router(
        db.pool.clone(),
        WebConfig::new()
            .actions(true)
            .refresh(Duration::from_secs(1)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The page's visible text.
async fn text(client: &Client) -> String {
    client
        .find(Locator::Css("body"))
        .await
        .expect("a body")
        .text()
        .await
        .expect("its text")
}

/// The text of the element `css` selects, once the page shows it (a click's
/// navigation ends after the click returns).
async fn shown(client: &Client, css: &str) -> String {
    client
        .wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} never appeared: {e}"))
        .text()
        .await
        .unwrap()
}

/// Clicks the element `css` selects.
async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .click()
        .await
        .unwrap();
}

/// The first whole number in `s`, thousands separators allowed.
fn first_number(s: &str) -> u64 {
    let digits: String = s
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number in {s:?}"))
}

/// `n` as the dashboard writes counts.
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&db.pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_browser_under_load() {
    if chrome::skipped() {
        eprintln!("browser test skipped (LQ_BROWSER_TESTS=skip)");
        return;
    }
    let db = TestDb::new().await;
    let _runtime = seed::seed(&db).await;
    let base = serve(&db).await;
    let browser = Browser::start().await;
    let client = &browser.client;

    every_page(&db, &browser, &base).await;
    refreshes_itself(client, &base).await;
    retry_the_dead_of_one_kind(&db, &browser, &base).await;

    browser
        .client
        .clone()
        .close()
        .await
        .expect("close the session");
}

/// Each page, rendered by the browser, shows what the database holds.
async fn every_page(db: &TestDb, browser: &Browser, base: &str) {
    let client = &browser.client;

    client.goto(&format!("{base}/")).await.unwrap();
    let overview = text(client).await;
    for queue in ["emails", "billing", "reports", "webhooks", "maintenance"] {
        assert!(
            overview.contains(queue),
            "overview lacks queue {queue}:\n{overview}"
        );
    }
    assert!(
        overview.to_lowercase().contains("paused"),
        "billing's pause not shown:\n{overview}"
    );
    assert!(
        overview.contains("worker-1.prod"),
        "the runtime is not listed:\n{overview}"
    );
    assert!(
        overview.contains(&grouped(seed::CHARGES_WAITING)),
        "billing's waiting charges not counted:\n{overview}"
    );
    let charts = client.find_all(Locator::Css("svg")).await.unwrap();
    assert!(!charts.is_empty(), "no charts on the overview");
    browser.screenshot("overview").await;

    client.goto(&format!("{base}/jobs")).await.unwrap();
    let jobs = text(client).await;
    assert!(
        jobs.contains("billing.charge") || jobs.contains("reports.build"),
        "{jobs}"
    );
    browser.screenshot("jobs").await;

    client
        .goto(&format!("{base}/jobs?state=dead"))
        .await
        .unwrap();
    let dead = text(client).await;
    assert!(
        dead.contains(&grouped(seed::EMAILS_BOUNCED)),
        "dead tab count missing:\n{dead}"
    );
    assert!(dead.contains("mail.send"), "{dead}");
    browser.screenshot("jobs-dead").await;

    // A dead email's page: payload hidden until asked, every attempt's error.
    let id = count(db, "select max(id) from lq.all_jobs where state = 'dead'").await;
    client.goto(&format!("{base}/jobs/{id}")).await.unwrap();
    let job = text(client).await;
    assert_eq!(
        job.matches("mailbox unavailable").count(),
        3,
        "three attempts' errors:\n{job}"
    );
    assert!(
        job.contains("worker-1.prod"),
        "the worker of each attempt:\n{job}"
    );
    let payload = client
        .find(Locator::Css("details"))
        .await
        .expect("payload in <details>");
    assert_eq!(
        payload.attr("open").await.unwrap(),
        None,
        "payload shown before it was asked for"
    );
    payload
        .find(Locator::Css("summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(
        text(client).await.contains("@bounce.test"),
        "payload not shown when asked"
    );
    browser.screenshot("job").await;

    client.goto(&format!("{base}/queues")).await.unwrap();
    let queues = text(client).await;
    assert!(
        queues.contains("ops@example.com") || queues.to_lowercase().contains("paused"),
        "{queues}"
    );
    browser.screenshot("queues").await;

    client.goto(&format!("{base}/cron")).await.unwrap();
    let cron = text(client).await;
    for expected in [
        "maintenance.nightly_cleanup",
        "0 3 * * *",
        "Europe/Berlin",
        "*/15 * * * *",
    ] {
        assert!(
            cron.contains(expected),
            "cron page lacks {expected}:\n{cron}"
        );
    }
    browser.screenshot("cron").await;

    client.goto(&format!("{base}/runtimes")).await.unwrap();
    let runtimes = text(client).await;
    assert!(runtimes.contains("worker-1.prod"), "{runtimes}");
    assert!(
        runtimes.to_lowercase().contains("leader"),
        "the leader is not marked:\n{runtimes}"
    );
    browser.screenshot("runtimes").await;

    client.goto(&format!("{base}/doctor")).await.unwrap();
    let doctor = text(client).await;
    for expected in ["Doctor", "autovacuum", "replication slots", "leader"] {
        assert!(
            doctor.contains(expected),
            "doctor page lacks {expected}:\n{doctor}"
        );
    }
    browser.screenshot("doctor").await;

    // A bad filter is a page that says what is wrong, not a blank one.
    client.goto(&format!("{base}/jobs?id=abc")).await.unwrap();
    let bad = text(client).await;
    assert!(
        bad.contains("abc"),
        "the error does not name the bad value:\n{bad}"
    );
    browser.screenshot("error").await;
}

/// The page's script swaps in fresh content on its own: a mark put inside the
/// main region is gone once a refresh has replaced it.
async fn refreshes_itself(client: &Client, base: &str) {
    client.goto(&format!("{base}/")).await.unwrap();
    client
        .execute(
            "document.getElementById('lq-main').insertAdjacentHTML('afterbegin', '<i id=\"test-mark\"></i>');",
            vec![],
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    while !client
        .find_all(Locator::Id("test-mark"))
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the overview did not refresh itself within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The click flow: filter dead jobs by kind, act on everything matching, confirm
/// the number the server counted, and see the jobs run.
async fn retry_the_dead_of_one_kind(db: &TestDb, browser: &Browser, base: &str) {
    let client = &browser.client;
    // The fix is deployed: bounced addresses now send.
    seed::MAILER_FIXED.store(true, Ordering::SeqCst);

    client
        .goto(&format!("{base}/jobs?state=dead"))
        .await
        .unwrap();
    let filters = client.form(Locator::Css("form.filters")).await.unwrap();
    filters.set_by_name("kind", "mail.send").await.unwrap();
    filters.submit().await.unwrap();
    // The submit returns before the browser has navigated: wait for the
    // filtered page's address.
    let started = std::time::Instant::now();
    loop {
        let url = client.current_url().await.unwrap();
        if url.as_str().contains("kind=mail.send") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the filter did not apply: {url}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shown(client, "form.all-matching").await;
    browser.screenshot("flow-1-filtered").await;

    click(client, "form.all-matching button[value=retry]").await;
    let question = shown(client, "#confirm-question").await;
    let dead_now = count(
        db,
        "select count(*) from lq.all_jobs where kind = 'mail.send' and state = 'dead'",
    )
    .await;
    assert_eq!(first_number(&question), dead_now as u64, "{question}");
    assert_eq!(dead_now as u64, seed::EMAILS_BOUNCED);
    browser.screenshot("flow-2-confirm").await;

    click(client, "form.confirm button[name=confirm]").await;
    let result = shown(client, "#bulk-result").await;
    assert!(result.contains(&grouped(seed::EMAILS_BOUNCED)), "{result}");
    browser.screenshot("flow-3-result").await;

    // They run: every email sent, none dead.
    db.wait_for(
        "the retried emails to be sent",
        &format!(
            "select count(*) = {} from lq.all_jobs where kind = 'mail.send' and state = 'succeeded'",
            seed::EMAILS_SENT + seed::EMAILS_BOUNCED
        ),
        Duration::from_secs(60),
    )
    .await;
    client
        .goto(&format!("{base}/jobs?state=succeeded&kind=mail.send"))
        .await
        .unwrap();
    let sent = text(client).await;
    assert!(
        sent.contains(&grouped(seed::EMAILS_SENT + seed::EMAILS_BOUNCED)),
        "{sent}"
    );
    client
        .goto(&format!("{base}/jobs?state=dead&kind=mail.send"))
        .await
        .unwrap();
    let rows = client
        .find_all(Locator::Css("form#selection tbody tr"))
        .await
        .unwrap();
    assert!(rows.is_empty(), "dead emails still listed after the retry");
    browser.screenshot("flow-4-none-dead").await;
}
