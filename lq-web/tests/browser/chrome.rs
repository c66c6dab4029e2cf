//! Debian's headless Chromium, driven through its ChromeDriver with `fantoccini`
//! (WebDriver): nothing is downloaded at test time. `scripts/with-chromium`
//! installs both; a missing one fails the test with that instruction, unless
//! `LQ_BROWSER_TESTS=skip` asks to skip.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{wd::Capabilities, Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// The window every page is looked at in.
pub const WIDTH: u32 = 1280;
pub const HEIGHT: u32 = 900;

/// A ChromeDriver process (killed on drop) and a browser session on it.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Whether the browser tests were asked to be skipped.
pub fn skipped() -> bool {
    std::env::var("LQ_BROWSER_TESTS").as_deref() == Ok("skip")
}

/// `name` on `PATH`, or a failure that says how to install it.
fn find(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found: the browser tests need Debian's chromium and chromium-driver \
                 (apt-get install chromium chromium-driver; scripts/test installs them). \
                 Set LQ_BROWSER_TESTS=skip to skip these tests."
            )
        })
}

impl Browser {
    /// Starts ChromeDriver on a free port and opens a headless session.
    pub async fn start() -> Self {
        let chromium = find("chromium");
        let chromedriver = find("chromedriver");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut caps = Capabilities::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": [
                    "--headless=new",
                    // Tests may run as root, where Chromium's sandbox cannot start.
                    "--no-sandbox",
                    "--disable-dev-shm-usage",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    format!("--window-size={WIDTH},{HEIGHT}"),
                ],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        // ChromeDriver answers once it listens: retry the session until then.
        let started = Instant::now();
        let client = loop {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(e) if started.elapsed() < Duration::from_secs(30) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no browser session from chromedriver after 30 s: {e}"),
            }
        };
        Self { client, driver }
    }

    /// Saves what the window shows as `name.png` in the screenshot directory
    /// (`target/screenshots`, or `LQ_SCREENSHOTS`).
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot directory");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }
}

/// Where screenshots go.
pub fn screenshot_dir() -> PathBuf {
    std::env::var_os("LQ_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../target/screenshots"
            ))
        })
}
