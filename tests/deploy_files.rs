//! The deployment files parse, and the knobs that must agree with the server do: probe paths,
//! drain time against the request deadline, the session hash, the autoscaling metric.
//! (`tests/scale_out.rs` runs the nginx file for real.)

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every YAML document of a file, as JSON values.
fn docs(name: &str) -> Vec<Value> {
    let path = Path::new(ROOT).join("deploy/k8s").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{name}: invalid YAML: {e}")))
        .collect()
}

fn one(name: &str, kind: &str) -> Value {
    let d = docs(name);
    assert_eq!(d.len(), 1, "{name}: one document");
    assert_eq!(d[0]["kind"], kind, "{name}");
    assert!(d[0]["apiVersion"].is_string(), "{name}: apiVersion");
    d[0].clone()
}

/// `--flag=value` from a container's args.
fn arg<'a>(args: &'a [Value], flag: &str) -> Option<&'a str> {
    args.iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(flag)?.strip_prefix('='))
}

#[test]
fn every_manifest_is_valid_yaml_with_a_kind() {
    let dir = Path::new(ROOT).join("deploy/k8s");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("deploy/k8s") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "yaml") {
            let name = p.file_name().and_then(|f| f.to_str()).expect("name");
            for d in docs(name) {
                assert!(d["kind"].is_string(), "{name}: a document without kind");
                assert!(d["metadata"]["name"].is_string(), "{name}: metadata.name");
                n += 1;
            }
        }
    }
    assert!(
        n >= 5,
        "expected Deployment, Service, Ingress, HPA, PDB, adapter rules; found {n}"
    );
}

#[test]
fn deployment_probes_and_drain_match_the_server() {
    let d = one("deployment.yaml", "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args = c["args"].as_array().expect("args");
    assert_eq!(args[0], "serve");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/health");
    assert_eq!(c["startupProbe"]["httpGet"]["path"], "/health");
    // The replica id is the pod name, so X-Cinder-Replica tells pods apart.
    assert_eq!(arg(args, "--replica-id"), Some("$(POD_NAME)"));
    let port: u64 = arg(args, "--port").expect("--port").parse().expect("port");
    assert_eq!(c["ports"][0]["containerPort"], port);
    // Grace ≥ preStop pause + the longest request, or a rolling update cuts live streams.
    let timeout: u64 = arg(args, "--request-timeout")
        .expect("--request-timeout")
        .parse()
        .expect("seconds");
    let pre_stop = &c["lifecycle"]["preStop"]["exec"]["command"];
    assert_eq!(pre_stop[0], "sleep");
    let pause: u64 = pre_stop[1]
        .as_str()
        .expect("sleep")
        .parse()
        .expect("seconds");
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    assert!(
        grace >= pause + timeout,
        "grace {grace} < preStop {pause} + timeout {timeout}"
    );
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["requests"]["cpu"].is_string());
    // The Service and the PDB select these pods.
    let labels = &d["spec"]["template"]["metadata"]["labels"];
    let svc = one("service.yaml", "Service");
    for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&labels[k], v, "service selector {k}");
    }
    let pdb = one("pdb.yaml", "PodDisruptionBudget");
    for (k, v) in pdb["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("pdb selector")
    {
        assert_eq!(&labels[k], v, "pdb selector {k}");
    }
    let named: Vec<&str> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for p in svc["spec"]["ports"].as_array().expect("service ports") {
        let t = p["targetPort"].as_str().expect("named targetPort");
        assert!(
            named.contains(&t),
            "service targets port {t} the pod does not name"
        );
    }
}

#[test]
fn ingress_hashes_by_session_and_never_buffers_streams() {
    let ing = one("ingress.yaml", "Ingress");
    let a = &ing["metadata"]["annotations"];
    let hash = a["nginx.ingress.kubernetes.io/upstream-hash-by"]
        .as_str()
        .expect("upstream-hash-by");
    assert!(hash.contains("$http_x_session_id"), "{hash}");
    assert_eq!(a["nginx.ingress.kubernetes.io/proxy-buffering"], "off");
    let read: u64 = a["nginx.ingress.kubernetes.io/proxy-read-timeout"]
        .as_str()
        .expect("read timeout")
        .parse()
        .expect("seconds");
    assert!(
        read >= 600,
        "read timeout {read} below the server's deadline"
    );
    let next = a["nginx.ingress.kubernetes.io/proxy-next-upstream"]
        .as_str()
        .expect("next upstream");
    assert!(
        !next.contains("non_idempotent") && !next.contains("http_5"),
        "{next}"
    );
    let backend = &ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"], "cinder");
}

#[test]
fn autoscaler_uses_a_metric_the_server_exports() {
    let hpa = one("hpa.yaml", "HorizontalPodAutoscaler");
    let m = &hpa["spec"]["metrics"][0];
    assert_eq!(m["type"], "Pods");
    let name = m["pods"]["metric"]["name"].as_str().expect("metric");
    let exported = include_str!("../server/src/metrics.rs");
    assert!(
        exported.contains(&format!("\"{name}\"")),
        "{name} is not a server metric"
    );
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "cinder");
    let rules = one("prometheus-adapter-rules.yaml", "ConfigMap");
    let cfg: Value =
        serde_yaml::from_str(rules["data"]["config.yaml"].as_str().expect("config.yaml"))
            .expect("adapter rules parse");
    assert_eq!(cfg["rules"][0]["name"]["as"], name);
}

#[test]
fn nginx_file_is_sticky_sse_safe_and_never_replays_a_post() {
    let conf = std::fs::read_to_string(Path::new(ROOT).join("deploy/nginx/cinder.conf"))
        .expect("deploy/nginx/cinder.conf");
    let directives: Vec<&str> = conf
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    for want in [
        "hash $cinder_session_key consistent;",
        "proxy_buffering off;",
        "proxy_next_upstream error timeout;",
        "include cinder-replicas.conf;",
    ] {
        assert!(directives.contains(&want), "missing `{want}`");
    }
    assert!(
        !directives.iter().any(|d| d.contains("non_idempotent")),
        "a started generation must never be replayed"
    );
    // The header is the key, the client address the fallback.
    assert!(directives.contains(&"default $http_x_session_id;"));
    assert!(directives.contains(&"\"\"      $remote_addr;"));
}
