//! Scale-out end to end: `deploy/local-cluster.sh 3` (three real `cinder serve` replicas and nginx
//! with `deploy/nginx/cinder.conf`) on loopback, driven by chat clients that re-send their growing
//! conversation every turn, as OpenAI clients do.
//!
//! - Sticky sessions: every turn of a session lands on one replica (`X-Cinder-Replica`), and the
//!   aggregate prefix-cache hit rate beats nginx round-robin (the same file without its `hash`
//!   line) on the same workload, both measured here from the replicas' `/metrics` — by 3× or
//!   more with one client (`CINDER_SCALE_CLIENTS` sets more; see the bar's comment below).
//! - Failure: a replica killed (SIGKILL) mid-run moves only its own sessions, they succeed on their
//!   next request, and no request sent after the kill fails.
//!
//! The figures are printed (`--nocapture`) and recorded in docs/perf.md.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The clusters share two cores: never run two at once.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

const SESSIONS: usize = 30;
const TURNS: usize = 4;
/// Reply length cap: a short chat answer (SmolLM2's greedy answers here run 20–64 tokens).
const MAX_TOKENS: u64 = 64;

/// Concurrent clients: `CINDER_SCALE_CLIENTS`, else `default`.
fn clients(default: usize) -> usize {
    std::env::var("CINDER_SCALE_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

struct Cluster {
    script: Child,
    balancer: String,
    /// replica id → (URL, pid)
    replicas: BTreeMap<String, (String, u32)>,
}

impl Cluster {
    fn start(n: usize, policy: &str) -> Self {
        let port = free_port_run(n + 1);
        let mut script = Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/deploy/local-cluster.sh"
            ))
            .args([n.to_string().as_str(), "smollm2-135m"])
            .env("CINDER_BIN", env!("CARGO_BIN_EXE_cinder"))
            .env("CINDER_CLUSTER_PORT", port.to_string())
            .env("CINDER_LB_POLICY", policy)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("local-cluster.sh starts");
        let out = script.stdout.take().expect("stdout");
        let mut balancer = String::new();
        let mut replicas = BTreeMap::new();
        for line in BufReader::new(out).lines() {
            let line = line.expect("stdout line");
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["replica", id, url, "pid", pid] => {
                    replicas.insert(id.to_string(), (url.to_string(), pid.parse().expect("pid")));
                }
                ["balancer", url] => balancer = url.to_string(),
                ["ready"] => break,
                _ => {}
            }
        }
        assert!(!balancer.is_empty(), "the script printed no balancer");
        assert_eq!(replicas.len(), n, "the script printed {n} replicas");
        Self {
            script,
            balancer,
            replicas,
        }
    }

    /// (prefix-cache hit tokens, queried tokens), summed over live replicas.
    fn prefix_tokens(&self) -> (f64, f64) {
        let mut hit = 0.0;
        let mut queried = 0.0;
        for (url, _) in self.replicas.values() {
            let Ok(r) = http().get(format!("{url}/metrics")).send() else {
                continue;
            };
            let text = r.text().unwrap_or_default();
            hit += metric(&text, "cinder_prefix_cache_hit_tokens_total");
            queried += metric(&text, "cinder_prefix_cache_queried_tokens_total");
        }
        (hit, queried)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGTERM: the script's trap stops the replicas and nginx it started.
        let _ = Command::new("kill")
            .args(["-TERM", &self.script.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.script.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.script.kill();
    }
}

/// The first of `n` consecutive free loopback ports.
fn free_port_run(n: usize) -> u16 {
    let seed = std::process::id() as usize;
    for i in 0..200 {
        let base = 20000 + ((seed * 7 + i * 131) % 40000) as u16;
        let held: Vec<_> = (0..n as u16)
            .map_while(|k| TcpListener::bind(("127.0.0.1", base + k)).ok())
            .collect();
        if held.len() == n {
            return base;
        }
    }
    panic!("no run of {n} free ports");
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("client")
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A user message distinct per session and turn (a chat that asks follow-up questions).
fn user_message(session: usize, turn: usize) -> String {
    const TOPICS: [&str; 10] = [
        "lighthouses",
        "honey bees",
        "volcanoes",
        "the printing press",
        "glaciers",
        "octopuses",
        "bridges",
        "tea",
        "comets",
        "violins",
    ];
    let topic = TOPICS[session % TOPICS.len()];
    match turn {
        0 => format!(
            "I am writing note number {session} for a school project about {topic}. \
             Give me one short fact about {topic} to start with."
        ),
        1 => format!("Thanks. Why does that matter for people who care about {topic}?"),
        2 => format!("Give me a second fact about {topic}, in one sentence, for note {session}."),
        _ => "Now summarise what you told me in one line.".to_string(),
    }
}

/// One chat turn through the balancer: the reply, the replica, the time to first token.
struct Turn {
    text: String,
    replica: String,
    ttft: Duration,
}

fn chat_turn(url: &str, session: usize, messages: &[Value]) -> Result<Turn, String> {
    let t0 = Instant::now();
    let mut r = http()
        .post(format!("{url}/v1/chat/completions"))
        .header("X-Session-Id", format!("session-{session}"))
        .json(&json!({
            "model": "smollm2-135m",
            "messages": messages,
            "max_tokens": MAX_TOKENS,
            "temperature": 0.0,
            "stream": true,
        }))
        .send()
        .map_err(|e| format!("send: {e}"))?;
    let status = r.status().as_u16();
    let replica = r
        .headers()
        .get("x-cinder-replica")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if status != 200 {
        return Err(format!("status {status}: {}", r.text().unwrap_or_default()));
    }
    // Read the SSE stream as it arrives: the first event with text gives the TTFT.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut ttft = None;
    let mut text = String::new();
    let mut done = false;
    while !done {
        let n = r.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let event = String::from_utf8_lossy(&event);
            let Some(data) = event.trim().strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                done = true;
                break;
            }
            let v: Value = serde_json::from_str(data).map_err(|e| format!("event {data}: {e}"))?;
            if let Some(piece) = v["choices"][0]["delta"]["content"].as_str()
                && !piece.is_empty()
            {
                ttft.get_or_insert_with(|| t0.elapsed());
                text.push_str(piece);
            }
        }
    }
    if !done {
        return Err(format!("stream from {replica} ended without [DONE]"));
    }
    Ok(Turn {
        text,
        replica,
        ttft: ttft.unwrap_or_else(|| t0.elapsed()),
    })
}

/// What one run of the workload saw.
struct RunResult {
    /// session → the replica of each turn
    placement: Vec<Vec<String>>,
    ttfts: Vec<Duration>,
    hit_rate: f64,
}

/// Runs `f(session)` for every session, `clients` client threads at a time, each taking the
/// next session when it is done with one.
fn each_session(clients: usize, f: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| {
                loop {
                    let session = next.fetch_add(1, Ordering::Relaxed);
                    if session >= SESSIONS {
                        break;
                    }
                    f(session);
                }
            });
        }
    });
}

/// One session's outcome: its index, the replica and the TTFT of each turn.
type SessionRun = (usize, Vec<String>, Vec<Duration>);

/// 30 sessions × 4 turns, `clients` users at a time, each going through one session's turns in order.
fn run_workload(c: &Cluster, clients: usize) -> RunResult {
    let results: Mutex<Vec<SessionRun>> = Mutex::new(Vec::new());
    each_session(clients, |session| {
        let mut messages = Vec::new();
        let mut replicas = Vec::new();
        let mut ttfts = Vec::new();
        for turn in 0..TURNS {
            messages.push(json!({"role": "user", "content": user_message(session, turn)}));
            let t = chat_turn(&c.balancer, session, &messages)
                .unwrap_or_else(|e| panic!("session {session} turn {turn}: {e}"));
            messages.push(json!({"role": "assistant", "content": t.text}));
            replicas.push(t.replica);
            ttfts.push(t.ttft);
        }
        results
            .lock()
            .expect("results")
            .push((session, replicas, ttfts));
    });
    let mut results = results.into_inner().expect("results");
    results.sort_by_key(|r| r.0);
    let (hit, queried) = c.prefix_tokens();
    assert!(queried > 0.0, "the replicas counted no prompt tokens");
    RunResult {
        placement: results.iter().map(|r| r.1.clone()).collect(),
        ttfts: results.iter().flat_map(|r| r.2.clone()).collect(),
        hit_rate: hit / queried,
    }
}

fn median_ms(v: &[Duration]) -> f64 {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

fn p90_ms(v: &[Duration]) -> f64 {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    ms[(ms.len() * 9 / 10).min(ms.len() - 1)]
}

#[test]
fn sticky_sessions_stay_on_one_replica_and_hit_the_prefix_cache_more_than_round_robin() {
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let clients = clients(1);
    let sticky = {
        let c = Cluster::start(3, "session");
        run_workload(&c, clients)
    };
    let rr = {
        let c = Cluster::start(3, "round-robin");
        run_workload(&c, clients)
    };
    for (s, reps) in sticky.placement.iter().enumerate() {
        assert!(
            reps.iter().all(|r| !r.is_empty() && *r == reps[0]),
            "session {s} moved between replicas: {reps:?}"
        );
    }
    let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for reps in &sticky.placement {
        *per_replica.entry(reps[0].as_str()).or_default() += 1;
    }
    let rr_moves = rr
        .placement
        .iter()
        .map(|reps| reps.windows(2).filter(|w| w[0] != w[1]).count())
        .sum::<usize>();
    eprintln!(
        "scale-out, {SESSIONS} sessions x {TURNS} turns, {} client(s), {MAX_TOKENS} tokens per reply:\n  \
         sticky: sessions per replica {per_replica:?}, prefix-cache hit rate {:.3}, TTFT median {:.0} ms p90 {:.0} ms\n  \
         round-robin: {rr_moves} of {} turn changes moved replica, hit rate {:.3}, TTFT median {:.0} ms p90 {:.0} ms\n  \
         ratio {:.2}x",
        clients,
        sticky.hit_rate,
        median_ms(&sticky.ttfts),
        p90_ms(&sticky.ttfts),
        SESSIONS * (TURNS - 1),
        rr.hit_rate,
        median_ms(&rr.ttfts),
        p90_ms(&rr.ttfts),
        sticky.hit_rate / rr.hit_rate,
    );
    assert!(
        per_replica.len() >= 2,
        "consistent hashing put every session on one replica: {per_replica:?}"
    );
    assert!(
        sticky.hit_rate > rr.hit_rate,
        "stickiness did not raise the prefix-cache hit rate ({:.3} vs {:.3})",
        sticky.hit_rate,
        rr.hit_rate
    );
    // The 3x bar holds for round-robin proper: one client, so each turn goes to the next
    // replica and only turn 4 finds an earlier turn (turn 1) of its session. Concurrent clients
    // make round-robin's placement effectively random; with 3 replicas and 4 turns a random
    // placement keeps about a third of the reuse, which bounds the ratio near 2.1x (docs/perf.md).
    if clients == 1 {
        assert!(
            sticky.hit_rate >= 3.0 * rr.hit_rate,
            "sticky hit rate {:.3} is under 3x round-robin's {:.3}",
            sticky.hit_rate,
            rr.hit_rate
        );
    }
}

/// One request of the failure run.
struct Outcome {
    session: usize,
    turn: usize,
    started: Instant,
    result: Result<String, String>,
}

#[test]
fn a_killed_replica_moves_only_its_sessions_and_no_unstarted_request_fails() {
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let c = Cluster::start(3, "session");
    let conversations: Vec<Mutex<Vec<Value>>> =
        (0..SESSIONS).map(|_| Mutex::new(Vec::new())).collect();
    let outcomes: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let killed: Mutex<Option<(String, Instant)>> = Mutex::new(None);
    let victim = "replica-2";
    let clients = clients(3);

    // Turn-major: every session's turn t, `clients` at a time; the kill lands in turn 3.
    for turn in 0..TURNS {
        each_session(clients, |session| {
            if turn == 2 && session == SESSIONS / 3 {
                let mut k = killed.lock().expect("killed");
                if k.is_none() {
                    let pid = c.replicas[victim].1;
                    let st = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status()
                        .expect("kill");
                    assert!(st.success());
                    // Wait until it is gone: requests after this point did not start
                    // before the kill.
                    while Command::new("kill")
                        .args(["-0", &pid.to_string()])
                        .stderr(Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success())
                    {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    *k = Some((victim.to_string(), Instant::now()));
                }
            }
            let mut conv = conversations[session].lock().expect("conversation");
            conv.push(json!({"role": "user", "content": user_message(session, turn)}));
            let mut started = Instant::now();
            let mut result = chat_turn(&c.balancer, session, &conv);
            if let Err(e) = result {
                // A request cut by the kill; the client's retry is the session's
                // next request, which must succeed elsewhere.
                outcomes.lock().expect("outcomes").push(Outcome {
                    session,
                    turn,
                    started,
                    result: Err(e),
                });
                started = Instant::now();
                result = chat_turn(&c.balancer, session, &conv);
            }
            let r = result.map(|t| {
                conv.push(json!({"role": "assistant", "content": t.text}));
                t.replica
            });
            outcomes.lock().expect("outcomes").push(Outcome {
                session,
                turn,
                started,
                result: r,
            });
        });
    }
    let (victim, kill_time) = killed
        .into_inner()
        .expect("killed")
        .expect("the kill happened");
    let outcomes = outcomes.into_inner().expect("outcomes");
    // The replica each session had before the kill (turns 1 and 2 all succeeded).
    let mut home: HashMap<usize, String> = HashMap::new();
    for o in outcomes.iter().filter(|o| o.turn < 2) {
        let r = o.result.as_ref().unwrap_or_else(|e| {
            panic!(
                "session {} turn {} failed before the kill: {e}",
                o.session, o.turn
            )
        });
        let h = home.entry(o.session).or_insert_with(|| r.clone());
        assert_eq!(h, r, "session {} moved before the kill", o.session);
    }
    let mut failed_in_flight = 0;
    let mut moved: HashMap<usize, String> = HashMap::new();
    for o in &outcomes {
        match &o.result {
            Err(e) => {
                assert!(
                    o.started < kill_time && home[&o.session] == victim,
                    "session {} turn {} failed without having started on the killed replica: {e}",
                    o.session,
                    o.turn
                );
                failed_in_flight += 1;
            }
            Ok(r) if o.turn >= 2 && home[&o.session] != victim => assert_eq!(
                r, &home[&o.session],
                "session {} left its live replica",
                o.session
            ),
            Ok(r) if o.started > kill_time => {
                assert_ne!(
                    r, &victim,
                    "a request after the kill reached the dead replica"
                );
                let m = moved.entry(o.session).or_insert_with(|| r.clone());
                assert_eq!(
                    m, r,
                    "moved session {} did not stay on its new replica",
                    o.session
                );
            }
            Ok(_) => {}
        }
    }
    let victims = home.values().filter(|r| **r == victim).count();
    assert!(victims > 0, "no session lived on {victim}");
    eprintln!(
        "failover: {victim} killed in turn 3 with {victims} of {SESSIONS} sessions; \
         {failed_in_flight} in-flight requests cut, {} sessions moved and succeeded after",
        moved.len()
    );
    assert_eq!(
        moved.len(),
        victims,
        "every session of {victim} moved and succeeded"
    );
}
