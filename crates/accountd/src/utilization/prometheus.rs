//! Per-job GPU utilization from a Prometheus server's HTTP API (`[usage] source = "prometheus"`).
//!
//! The original system read dcgm-exporter's `DCGM_FI_DEV_GPU_UTIL` from Prometheus, with the Slurm
//! job id in the `hpc_job` label (dcgm-exporter's HPC job mapping). The server, query, label and
//! timeout are `[prometheus]` of the config (`gputokens::config::Prometheus`), checked when it loads.

use std::collections::BTreeMap;
use std::time::Duration;

use gputokens::config::Prometheus;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
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

/// Utilization in percent per job id over `window`, evaluated at unix time `at`, from the server
/// `[prometheus]` names (checked when the config was read).
///
/// Blocking: from async code call it inside `tokio::task::spawn_blocking`.
pub fn job_utilization(
    source: &Prometheus,
    window: Duration,
    at: i64,
) -> Result<BTreeMap<String, f64>, PrometheusError> {
    let endpoint = format!("{}/api/v1/query", source.url.trim_end_matches('/'));
    let query = source.query_for(window);
    let unreachable = |e: reqwest::Error| PrometheusError::Unreachable { url: source.url.clone(), reason: chain(&e) };
    let client = reqwest::blocking::Client::builder().timeout(source.timeout).build().map_err(unreachable)?;
    let response = client
        .get(&endpoint)
        .query(&[("query", query.as_str()), ("time", &at.to_string())])
        .send()
        .map_err(unreachable)?;
    let status = response.status().as_u16();
    let body = response.text().map_err(unreachable)?;
    parse_response(&body, status, &source.url, &source.job_label, &query)
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
                gputokens::free_text::shown(job)
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
