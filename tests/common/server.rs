//! A real `cinder serve` process on loopback ports (any free ones), and a blocking HTTP client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// `cinder serve smollm2-135m` with extra flags; killed when dropped.
pub struct Server {
    /// the process
    pub child: Child,
    /// `http://host:port` of the HTTP API
    pub http: String,
    /// `http://host:port` of gRPC unless `--no-grpc`
    pub grpc: Option<String>,
}

impl Server {
    pub fn start(extra: &[&str]) -> Self {
        Self::start_model("smollm2-135m", extra)
    }

    /// `cinder serve MODEL` with extra flags.
    pub fn start_model(model: &str, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cinder"))
            .args(["serve", model, "--port", "0", "--grpc-port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cinder serve starts");
        let out = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(out).lines();
        let mut http = None;
        let mut grpc = None;
        while http.is_none() || (grpc.is_none() && !extra.contains(&"--no-grpc")) {
            let line = lines
                .next()
                .expect("server printed its address")
                .expect("stdout line");
            if let Some(a) = line.strip_prefix("listening on ") {
                http = Some(a.to_string());
            } else if let Some(a) = line.strip_prefix("grpc listening on ") {
                grpc = Some(format!("http://{a}"));
            }
        }
        Self {
            child,
            http: http.unwrap_or_default(),
            grpc,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.http)
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = client()
            .post(self.url(path))
            .json(body)
            .send()
            .expect("request");
        let status = r.status().as_u16();
        (status, r.json().unwrap_or(Value::Null))
    }

    /// A streamed request: the `data:` payloads in order.
    pub fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let r = client()
            .post(self.url(path))
            .json(body)
            .send()
            .expect("request");
        assert_eq!(r.status().as_u16(), 200);
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
        let text = r.text().expect("body");
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }

    /// Runs `tests/clients/SCRIPT BASE_URL ARGS...` with the official OpenAI Python client on its
    /// path ([`crate::common::openai_python_site`]) and returns the one JSON line it prints.
    pub fn python_client(&self, script: &str, args: &[&str]) -> Value {
        self.python_client_on(&super::openai_python_site(), script, args)
    }

    /// [`Server::python_client`] with the Python packages of `site` (another client's) on the path.
    pub fn python_client_on(&self, site: &std::path::Path, script: &str, args: &[&str]) -> Value {
        let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
        let out = Command::new("python3")
            .arg(path)
            .arg(&self.http)
            .args(args)
            .env("PYTHONPATH", site)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("script prints JSON")
    }

    pub fn metric(&self, name: &str) -> f64 {
        let text = client()
            .get(self.url("/metrics"))
            .send()
            .and_then(|r| r.text())
            .expect("metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(f64::NAN)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking client with a generous timeout.
pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client")
}
