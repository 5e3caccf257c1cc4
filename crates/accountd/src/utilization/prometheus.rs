//! Per-job GPU utilization from a Prometheus server's HTTP API (`usage_source = "prometheus"`).
//!
//! The original system read dcgm-exporter's `DCGM_FI_DEV_GPU_UTIL` from Prometheus, with the Slurm
//! job id in the `hpc_job` label (dcgm-exporter's HPC job mapping). The query is configurable so
//! sites with other exporters or label names can use it too.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// Replaced in `query` by the window as a PromQL duration (`"3600s"`, or `"1500ms"` when not whole
/// seconds).
pub const WINDOW_PLACEHOLDER: &str = "$window";
/// Average utilization (percent) of each job's GPUs over the window.
pub const DEFAULT_QUERY: &str = r#"avg by (hpc_job) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{hpc_job!=""}[$window]))"#;
pub const DEFAULT_JOB_LABEL: &str = "hpc_job";
pub const DEFAULT_TIMEOUT: &str = "10s";

/// The `[prometheus]` table of the config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusSource {
    /// Base URL, e.g. `http://127.0.0.1:9090`; http only (a path prefix such as `/prometheus` is kept).
    pub url: String,
    /// PromQL giving one sample per job, in percent 0..100; `$window` is substituted.
    #[serde(default = "default_query")]
    pub query: String,
    /// The label that holds the Slurm job id in the query's result.
    #[serde(default = "default_job_label")]
    pub job_label: String,
    /// How long one query may take, e.g. `"10s"`.
    #[serde(default = "default_timeout")]
    pub timeout: String,
}

fn default_query() -> String {
    DEFAULT_QUERY.to_string()
}

fn default_job_label() -> String {
    DEFAULT_JOB_LABEL.to_string()
}

fn default_timeout() -> String {
    DEFAULT_TIMEOUT.to_string()
}

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("prometheus.url '{url}' is not a usable http:// URL ({reason})")]
    BadUrl { url: String, reason: String },
    #[error("prometheus.timeout '{text}' is not a duration like \"10s\" ({reason})")]
    BadTimeout { text: String, reason: String },
    #[error("prometheus.job_label must not be empty")]
    EmptyJobLabel,
    #[error("cannot reach Prometheus at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("Prometheus at {url} answered HTTP {status}: {body}")]
    Http { url: String, status: u16, body: String },
    #[error("Prometheus rejected the query (HTTP {status}): {error_type}: {message} (query: {query})")]
    Query { status: u16, error_type: String, message: String, query: String },
    #[error("Prometheus returned a '{0}' result; the query must return an instant vector")]
    NotVector(String),
    #[error("a series in Prometheus's result has no '{label}' label (labels: {metric}); aggregate by it")]
    MissingLabel { label: String, metric: String },
    #[error("job {job} appears in more than one series; aggregate the query by the job label")]
    DuplicateJob { job: String },
    #[error("Prometheus's value '{value}' for job {job} is not a utilization in percent 0..100")]
    BadValue { job: String, value: String },
    #[error("unreadable answer from Prometheus: {0}")]
    Malformed(String),
}

impl PrometheusSource {
    /// Checks the settings without contacting the server (for `accountd config check`).
    pub fn validate(&self) -> Result<(), PrometheusError> {
        let bad_url = |reason: &str| PrometheusError::BadUrl { url: self.url.clone(), reason: reason.to_string() };
        let parsed = reqwest::Url::parse(&self.url).map_err(|e| bad_url(&e.to_string()))?;
        match parsed.scheme() {
            "http" => {}
            // reqwest is built without TLS (the server is expected on loopback or a trusted network).
            "https" => return Err(bad_url("https is not supported by this build; use http://")),
            _ => return Err(bad_url("the scheme must be http")),
        }
        if parsed.host_str().unwrap_or_default().is_empty() {
            return Err(bad_url("no host"));
        }
        if self.job_label.trim().is_empty() {
            return Err(PrometheusError::EmptyJobLabel);
        }
        self.timeout()?;
        Ok(())
    }

    pub fn timeout(&self) -> Result<Duration, PrometheusError> {
        let bad = |reason: String| PrometheusError::BadTimeout { text: self.timeout.clone(), reason };
        let d = humantime::parse_duration(&self.timeout).map_err(|e| bad(e.to_string()))?;
        if d.is_zero() {
            return Err(bad("must be longer than 0".into()));
        }
        Ok(d)
    }

    /// The query with the window substituted.
    pub fn query_for(&self, window: Duration) -> String {
        self.query.replace(WINDOW_PLACEHOLDER, &promql_duration(window))
    }

    /// Utilization in percent per job id over `window`, evaluated at unix time `at`.
    ///
    /// Blocking: from async code call it inside `tokio::task::spawn_blocking`.
    pub fn job_utilization(&self, window: Duration, at: i64) -> Result<BTreeMap<String, f64>, PrometheusError> {
        self.validate()?;
        let endpoint = format!("{}/api/v1/query", self.url.trim_end_matches('/'));
        let query = self.query_for(window);
        let unreachable = |e: reqwest::Error| PrometheusError::Unreachable { url: self.url.clone(), reason: chain(&e) };
        let client = reqwest::blocking::Client::builder().timeout(self.timeout()?).build().map_err(unreachable)?;
        let response = client
            .get(&endpoint)
            .query(&[("query", query.as_str()), ("time", &at.to_string())])
            .send()
            .map_err(unreachable)?;
        let status = response.status().as_u16();
        let body = response.text().map_err(unreachable)?;
        parse_response(&body, status, &self.url, &self.job_label, &query)
    }
}

/// PromQL duration syntax: whole seconds when possible, otherwise milliseconds.
fn promql_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// reqwest's top-level message ("error sending request") hides the cause; show the whole chain.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn http_error(url: &str, status: u16, body: &str) -> PrometheusError {
    let mut body: String = body.trim().chars().take(200).collect();
    if body.is_empty() {
        body = "(empty body)".into();
    }
    PrometheusError::Http { url: url.to_string(), status, body }
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    data: Option<Data>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct Sample {
    metric: BTreeMap<String, String>,
    /// `[unix time, "value"]`: Prometheus sends values as strings so NaN and ±Inf survive JSON.
    value: (serde_json::Value, String),
}

/// Turns an `/api/v1/query` answer into job id → percent.
fn parse_response(
    body: &str,
    http_status: u16,
    url: &str,
    job_label: &str,
    query: &str,
) -> Result<BTreeMap<String, f64>, PrometheusError> {
    let ok_status = (200..300).contains(&http_status);
    let envelope: Envelope = match serde_json::from_str(body) {
        Ok(e) => e,
        Err(_) if !ok_status => return Err(http_error(url, http_status, body)),
        Err(e) => return Err(PrometheusError::Malformed(e.to_string())),
    };
    if envelope.status != "success" {
        if envelope.status == "error" || !ok_status {
            return Err(PrometheusError::Query {
                status: http_status,
                error_type: envelope.error_type.unwrap_or_else(|| "unknown".into()),
                message: envelope.error.unwrap_or_else(|| "(no message)".into()),
                query: query.to_string(),
            });
        }
        return Err(PrometheusError::Malformed(format!("status '{}'", envelope.status)));
    }
    if !ok_status {
        return Err(http_error(url, http_status, body));
    }
    let data = envelope.data.ok_or_else(|| PrometheusError::Malformed("no 'data' in a success answer".into()))?;
    if data.result_type != "vector" {
        return Err(PrometheusError::NotVector(data.result_type));
    }
    let samples: Vec<Sample> =
        serde_json::from_value(data.result).map_err(|e| PrometheusError::Malformed(format!("vector result: {e}")))?;

    let mut jobs = BTreeMap::new();
    for sample in samples {
        let Some(job) = sample.metric.get(job_label).filter(|j| !j.is_empty()) else {
            return Err(PrometheusError::MissingLabel {
                label: job_label.to_string(),
                metric: format!("{:?}", sample.metric),
            });
        };
        // What Prometheus says of a job reaches the ledger, the metrics and idle_command: only
        // plain Slurm job IDs (an exporter's label is whatever its mapping files say).
        if crate::slurm::job_id_arg(job).is_err() {
            tracing::warn!(
                "Prometheus names a job '{}' that is no Slurm job ID: left out",
                crate::http::report_gate::shown(job)
            );
            continue;
        }
        let text = &sample.value.1;
        let percent = text.parse::<f64>().ok().filter(|v| v.is_finite() && (0.0..=100.0).contains(v));
        let Some(percent) = percent else {
            return Err(PrometheusError::BadValue { job: job.clone(), value: text.clone() });
        };
        if jobs.insert(job.clone(), percent).is_some() {
            return Err(PrometheusError::DuplicateJob { job: job.clone() });
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str, status: u16) -> Result<BTreeMap<String, f64>, PrometheusError> {
        parse_response(body, status, "http://prom", "hpc_job", "q")
    }

    fn vector(series: &str) -> String {
        format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{series}]}}}}"#)
    }

    #[test]
    fn success_maps_job_to_percent() {
        let body = vector(
            r#"{"metric":{"hpc_job":"101"},"value":[1700000000.5,"85"]},
               {"metric":{"hpc_job":"102","gpu":"1"},"value":[1700000000.5,"5.25"]}"#,
        );
        let jobs = parse(&body, 200).unwrap();
        assert_eq!(jobs, BTreeMap::from([("101".into(), 85.0), ("102".into(), 5.25)]));
        assert!(parse(&vector(""), 200).unwrap().is_empty());
    }

    #[test]
    fn error_answer_names_type_and_message() {
        let body =
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5: unclosed left parenthesis"}"#;
        let e = parse(body, 400).unwrap_err();
        assert!(matches!(e, PrometheusError::Query { status: 400, .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("bad_data") && text.contains("unclosed left parenthesis"), "{text}");
    }

    #[test]
    fn non_json_http_error_keeps_status_and_body() {
        let e = parse("404 page not found\n", 404).unwrap_err();
        assert!(matches!(e, PrometheusError::Http { status: 404, .. }), "{e:?}");
        assert!(e.to_string().contains("404 page not found"), "{e}");
        assert!(matches!(parse("<html>", 200).unwrap_err(), PrometheusError::Malformed(_)));
    }

    #[test]
    fn non_vector_result_is_refused() {
        let body = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        let e = parse(body, 200).unwrap_err();
        assert!(matches!(e, PrometheusError::NotVector(ref t) if t == "matrix"), "{e:?}");
        assert!(e.to_string().contains("instant vector"));
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#;
        assert!(matches!(parse(scalar, 200).unwrap_err(), PrometheusError::NotVector(_)));
    }

    #[test]
    fn missing_or_empty_job_label_is_an_error() {
        let e = parse(&vector(r#"{"metric":{"gpu":"0"},"value":[1,"3"]}"#), 200).unwrap_err();
        assert!(matches!(e, PrometheusError::MissingLabel { .. }), "{e:?}");
        assert!(e.to_string().contains("'hpc_job'") && e.to_string().contains("gpu"), "{e}");
        let empty = vector(r#"{"metric":{"hpc_job":""},"value":[1,"3"]}"#);
        assert!(matches!(parse(&empty, 200).unwrap_err(), PrometheusError::MissingLabel { .. }));
    }

    #[test]
    fn nan_infinite_out_of_range_and_junk_values_are_errors() {
        for value in ["NaN", "+Inf", "-1", "100.5", "busy"] {
            let body = vector(&format!(r#"{{"metric":{{"hpc_job":"7"}},"value":[1,"{value}"]}}"#));
            let e = parse(&body, 200).unwrap_err();
            assert!(matches!(e, PrometheusError::BadValue { ref job, .. } if job == "7"), "{value}: {e:?}");
            assert!(e.to_string().contains(value), "{e}");
        }
    }

    #[test]
    fn duplicate_job_is_an_error() {
        let body = vector(
            r#"{"metric":{"hpc_job":"7","gpu":"0"},"value":[1,"3"]},{"metric":{"hpc_job":"7","gpu":"1"},"value":[1,"4"]}"#,
        );
        assert!(matches!(parse(&body, 200).unwrap_err(), PrometheusError::DuplicateJob { .. }));
    }

    fn source(json: &str) -> PrometheusSource {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_window_and_validation() {
        let s = source(r#"{"url":"http://127.0.0.1:9090"}"#);
        assert_eq!((s.job_label.as_str(), s.timeout.as_str()), ("hpc_job", "10s"));
        s.validate().unwrap();
        assert_eq!(
            s.query_for(Duration::from_secs(3600)),
            r#"avg by (hpc_job) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{hpc_job!=""}[3600s]))"#
        );
        assert!(s.query_for(Duration::from_millis(1500)).contains("[1500ms]"));

        assert!(serde_json::from_str::<PrometheusSource>(r#"{"url":"http://x","qurey":"up"}"#).is_err());
        for url in ["127.0.0.1:9090", "ftp://host", "http://", "not a url", "https://prom:9090"] {
            let e = source(&format!(r#"{{"url":"{url}"}}"#)).validate().unwrap_err();
            assert!(matches!(e, PrometheusError::BadUrl { .. }), "{url}: {e:?}");
        }
        let e = source(r#"{"url":"http://h","timeout":"soon"}"#).validate().unwrap_err();
        assert!(matches!(e, PrometheusError::BadTimeout { .. }), "{e:?}");
        let e = source(r#"{"url":"http://h","job_label":" "}"#).validate().unwrap_err();
        assert!(matches!(e, PrometheusError::EmptyJobLabel), "{e:?}");
    }

    #[test]
    fn job_labels_that_are_not_job_ids_are_left_out() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"hpc_job":"101"},"value":[1700000000.5,"85"]},
            {"metric":{"hpc_job":"--user=bob"},"value":[1700000000.5,"5"]},
            {"metric":{"hpc_job":"102;rm"},"value":[1700000000.5,"5"]}]}}"#;
        let jobs = parse(body, 200).unwrap();
        assert_eq!(jobs.keys().collect::<Vec<_>>(), ["101"]);
    }
}
