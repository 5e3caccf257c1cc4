//! Parsers for one TOML value: each returns the setting or the reason it is not one (the reader
//! adds the key and what is used instead).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Value;

use crate::tokens::Tokens;

/// How a default is named in "using the default ...".
pub(super) trait Shown {
    fn shown(&self) -> String;
}

macro_rules! shown_by_display {
    ($($t:ty),*) => {$(
        impl Shown for $t {
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
shown_by_display!(bool, u32, u64, usize, i64, f64, Tokens);

impl Shown for String {
    fn shown(&self) -> String {
        format!("{self:?}")
    }
}

impl Shown for PathBuf {
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

impl Shown for Duration {
    fn shown(&self) -> String {
        humantime::format_duration(*self).to_string()
    }
}

impl Shown for SocketAddr {
    fn shown(&self) -> String {
        self.to_string()
    }
}

/// An optional setting: None is "off", as the file says it.
impl<T: Shown> Shown for Option<T> {
    fn shown(&self) -> String {
        self.as_ref().map_or("off".to_string(), Shown::shown)
    }
}

impl Shown for Vec<String> {
    fn shown(&self) -> String {
        format!("{self:?}")
    }
}

impl Shown for Vec<crate::stranding::Part> {
    fn shown(&self) -> String {
        format!("{:?}", self.iter().map(|p| p.name()).collect::<Vec<_>>())
    }
}

impl Shown for Vec<std::net::IpAddr> {
    fn shown(&self) -> String {
        format!("{:?}", self.iter().map(ToString::to_string).collect::<Vec<_>>())
    }
}

impl Shown for BTreeSet<u64> {
    fn shown(&self) -> String {
        format!("{:?}", self.iter().collect::<Vec<_>>())
    }
}

pub(super) fn boolean(value: &Value) -> Result<bool, String> {
    value.as_bool().ok_or_else(|| format!("expected true or false, got {value}"))
}

pub(super) fn string(value: &Value) -> Result<String, String> {
    value.as_str().map(str::to_string).ok_or_else(|| format!("expected a string, got {value}"))
}

/// A list of strings (`[]` too).
pub(super) fn strings(value: &Value) -> Result<Vec<String>, String> {
    let bad = || format!("expected a list of strings such as [\"a\"], got {value}");
    let list = value.as_array().ok_or_else(bad)?;
    list.iter().map(|v| v.as_str().map(str::to_string).ok_or_else(bad)).collect()
}

/// A command's argv: `[]` (off), or an absolute program path followed by its arguments, none empty.
pub(super) fn command_argv(value: &Value) -> Result<Vec<String>, String> {
    let argv = strings(value)?;
    match argv.first() {
        None => Ok(argv),
        Some(program) if !Path::new(program).is_absolute() => {
            Err(format!("the program must be an absolute path (got {program:?})"))
        }
        Some(_) if argv.iter().any(String::is_empty) => Err("an argument is empty".into()),
        Some(_) => Ok(argv),
    }
}

/// A list of host names (DNS names, no port or scheme), lower-cased; a trailing dot is dropped.
pub(super) fn host_names(value: &Value) -> Result<Vec<String>, String> {
    strings(value)?
        .into_iter()
        .map(|name| {
            let name = name.strip_suffix('.').unwrap_or(&name).to_ascii_lowercase();
            let label_ok = |l: &str| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            match name.split('.').all(label_ok) {
                true => Ok(name),
                false => Err(format!("'{name}' is not a host name (letters, digits, '-' and dots; no port or scheme)")),
            }
        })
        .collect()
}

/// A list of user, account or QOS names: no empty name.
pub(super) fn names(value: &Value) -> Result<Vec<String>, String> {
    let bad = || format!("expected a list of names such as [\"alice\"], got {value}");
    let list = value.as_array().ok_or_else(bad)?;
    list.iter().map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string).ok_or_else(bad)).collect()
}

/// A whole number from `min` to `max`.
pub(super) fn whole(value: &Value, min: i64, max: i64) -> Result<i64, String> {
    match value.as_integer() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from {min} to {max}, got {value}")),
    }
}

/// A whole number from `min` up to what `T` holds.
pub(super) fn whole_from<T: TryFrom<i64>>(value: &Value, min: i64) -> Result<T, String> {
    value
        .as_integer()
        .filter(|n| *n >= min)
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("expected a whole number from {min}, got {value}"))
}

/// An integer or a float.
pub(super) fn number(value: &Value) -> Result<f64, String> {
    match value {
        Value::Integer(n) => Ok(*n as f64),
        Value::Float(f) => Ok(*f),
        _ => Err(format!("expected a number, got {value}")),
    }
}

/// A number from `min` to `max`; `range` words the reason ("from 0 to 100").
pub(super) fn number_in(value: &Value, min: f64, max: f64, range: &str) -> Result<f64, String> {
    let n = number(value)?;
    if !(min..=max).contains(&n) {
        return Err(format!("must be {range} (got {n})"));
    }
    Ok(n)
}

/// A token amount within ±[`Tokens::LIMIT`].
pub(super) fn amount(value: &Value) -> Result<Tokens, String> {
    let n = number(value)?;
    let tokens = Tokens::from_f64(n).ok_or_else(|| format!("{n} is not a usable amount"))?;
    // Exact or refused: gputokens counts millionths of a token, and 0.0000001 would round to a free
    // GPU type. Rust writes a number in its shortest exact decimal form: at most 6 decimals there.
    let decimals = n.to_string().split_once('.').map_or(0, |(_, fraction)| fraction.len());
    if decimals > 6 {
        return Err(format!(
            "{n} has more than 6 decimals: gputokens counts millionths of a token, and would round it to {tokens}"
        ));
    }
    if !tokens.within_limit() {
        return Err(format!("{n} is beyond the limit of ±{} tokens", Tokens::LIMIT));
    }
    Ok(tokens)
}

pub(super) fn non_negative_amount(value: &Value) -> Result<Tokens, String> {
    let tokens = amount(value)?;
    if tokens < Tokens::ZERO {
        return Err(format!("must not be negative (got {})", number(value)?));
    }
    Ok(tokens)
}

pub(super) fn absolute_path(value: &Value) -> Result<PathBuf, String> {
    let text = value.as_str().ok_or_else(|| format!("expected an absolute path, got {value}"))?;
    if !Path::new(text).is_absolute() {
        return Err(format!("must be an absolute path (got {text})"));
    }
    Ok(text.into())
}

pub(super) fn path(value: &Value) -> Result<PathBuf, String> {
    string(value).map(PathBuf::from)
}

/// A duration such as "30m", "1h" or "0s".
pub(super) fn any_duration(value: &Value) -> Result<Duration, String> {
    let text = value.as_str().ok_or_else(|| format!("expected a duration like \"30m\" or \"1h\", got {value}"))?;
    humantime::parse_duration(text).map_err(|e| format!("'{text}' is not a duration like \"30m\" or \"1h\" ({e})"))
}

/// A duration longer than 0.
pub(super) fn positive_duration(value: &Value) -> Result<Duration, String> {
    let d = any_duration(value)?;
    if d.is_zero() {
        return Err("must be longer than 0".into());
    }
    Ok(d)
}

/// A duration of at least a second, such as "2h".
pub(super) fn whole_seconds(value: &Value) -> Result<Duration, String> {
    match value.as_str().map(humantime::parse_duration) {
        Some(Ok(d)) if d >= Duration::from_secs(1) => Ok(d),
        _ => Err(format!("expected a duration such as \"2h\", got {value}")),
    }
}

/// A duration of at least a second, or "off" (None).
pub(super) fn whole_seconds_or_off(value: &Value) -> Result<Option<Duration>, String> {
    if value.as_str() == Some("off") {
        return Ok(None);
    }
    whole_seconds(value).map(Some).map_err(|_| format!("expected a duration such as \"2h\" or \"off\", got {value}"))
}

/// `"off"` or `""` (None), else a socket address.
pub(super) fn listen_address(value: &Value) -> Result<Option<SocketAddr>, String> {
    match string(value)?.trim() {
        "" | "off" => Ok(None),
        text => text.parse().map(Some).map_err(|e| format!("'{text}' is not an address like \"127.0.0.1:9817\" ({e})")),
    }
}

/// The signal names `scancel --signal` knows (Slurm's sig_name2num, with or without `SIG`, in any
/// case); it takes a signal's number too.
const SLURM_SIGNALS: [&str; 16] = [
    "HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT", "STOP", "TSTP", "TTIN",
    "TTOU", "XCPU",
];

/// A signal's name or number such as "USR1", or "" (None). Whether scancel knows the name is a
/// warning ([`known_signal`]), not a problem: a file that started accountd before still does.
pub(super) fn signal_name(value: &Value) -> Result<Option<String>, String> {
    let signal = string(value)?.trim().to_string();
    if !signal.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("'{signal}' is not a signal name like \"USR1\""));
    }
    Ok((!signal.is_empty()).then_some(signal))
}

/// Whether `scancel --signal` takes `signal`: a name it knows or a number from 1 to 64.
pub(super) fn known_signal(signal: &str) -> bool {
    let upper = signal.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    signal.parse::<u8>().is_ok_and(|n| (1..=64).contains(&n)) || SLURM_SIGNALS.contains(&name)
}

/// The names [`known_signal`] takes, for a warning to list.
pub(super) fn signal_names() -> String {
    SLURM_SIGNALS.join(", ")
}

/// The longest path a Unix socket's address holds (sun_path's 108 bytes, less the final NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// An absolute path a Unix socket can be bound or reached at: at most [`MAX_SOCKET_PATH`] bytes.
pub(super) fn socket_path(value: &Value) -> Result<PathBuf, String> {
    let path = absolute_path(value)?;
    let bytes = path.as_os_str().len();
    if bytes > MAX_SOCKET_PATH {
        return Err(format!(
            "{} is {bytes} bytes: a Unix socket's path holds at most {MAX_SOCKET_PATH}; choose a shorter one",
            path.display()
        ));
    }
    Ok(path)
}

/// XIDs such as [79].
pub(super) fn xids(value: &Value) -> Result<BTreeSet<u64>, String> {
    let bad = || format!("expected a list of XIDs such as [79], got {value}");
    let list = value.as_array().ok_or_else(bad)?;
    list.iter().map(|v| v.as_integer().and_then(|n| u64::try_from(n).ok()).ok_or_else(bad)).collect()
}

/// A base URL for links: http(s)://host[:port][/path], without a trailing slash's worth of doubt.
pub(super) fn web_url(value: &Value) -> Result<String, String> {
    let url = string(value)?;
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !url.chars().any(char::is_whitespace) => {
            Ok(url.trim_end_matches('/').to_string())
        }
        _ => Err(format!("expected http://host[:port] or https://host[:port], got {url:?}")),
    }
}

/// `[accountd] urls`: one or two `https://host[:port]` (or, on a private network, `http://`)
/// addresses of accountd's listener, without a path.
pub(super) fn accountd_urls(value: &Value) -> Result<Vec<String>, String> {
    let urls = strings(value)?;
    if urls.len() > 2 {
        return Err(format!("at most two accountd hosts (a pair), got {}", urls.len()));
    }
    urls.into_iter()
        .map(|url| {
            let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
            match rest.map(|r| r.trim_end_matches('/')) {
                Some(rest) if !rest.is_empty() && !rest.contains('/') && !url.chars().any(|c| c.is_whitespace()) => {
                    Ok(url.trim_end_matches('/').to_string())
                }
                _ => Err(format!("expected \"https://host[:port]\" or \"http://host[:port]\", got {url:?}")),
            }
        })
        .collect()
}

/// The base URL of a server accountd queries: `http://host[:port][/path]` (its HTTP client has no
/// TLS).
pub(super) fn prometheus_url(value: &Value) -> Result<String, String> {
    let url = string(value)?;
    http_url(&url).map(|_| url)
}

/// Where the agents post their reports, accountd's HTTP listener: `http://host[:port][/path]`, or
/// `https://` where the listener has a certificate ([http] tls_certificate; the agent checks it
/// against `[accountd] ca_file`). Without a port it is the scheme's (a proxy in front of accountd).
fn report_url(value: &Value) -> Result<String, String> {
    let url = string(value)?;
    match url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://")) {
        true => http_url(&format!("http://{}", &url[8..])).map(|_| url),
        false => http_url(&url).map(|_| url),
    }
}

/// `report_to`: one URL, or a list of them (a pair's accountd hosts), at least one.
pub(super) fn report_urls(value: &Value) -> Result<Vec<String>, String> {
    match value.as_array() {
        None => Ok(vec![report_url(value)?]),
        Some(list) if list.is_empty() => Err("must name at least one URL".into()),
        Some(list) => list.iter().map(report_url).collect(),
    }
}

/// The host of an `http://` URL that [`http_url`] takes, lower-cased.
pub(crate) fn url_host(url: &str) -> Option<String> {
    http_url(url).ok().map(|(host, _)| host.to_ascii_lowercase())
}

/// `url` as `http://host[:port][/path]`: its host and port (None when not given, or empty).
fn http_url(url: &str) -> Result<(String, Option<u16>), String> {
    let bad = |reason: &str| Err(format!("'{url}' is not a usable http:// URL ({reason})"));
    let Some((scheme, rest)) = url.split_once("://") else { return bad("no scheme: it starts with http://") };
    match scheme.to_ascii_lowercase().as_str() {
        "http" => {}
        "https" => return bad("https is not supported by this build; use http://"),
        _ => return bad("the scheme must be http"),
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("it holds a space or a control character");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = match host_port.strip_prefix('[') {
        // An IPv6 address: `[::1]:9090`.
        Some(v6) => match v6.split_once(']') {
            Some((host, rest)) => (host, rest.strip_prefix(':')),
            None => return bad("an unclosed [ in the host"),
        },
        None => match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return bad("no host");
    }
    match port.filter(|p| !p.is_empty()).map(str::parse::<u16>) {
        Some(Err(_)) => bad("the port is not a number from 0 to 65535"),
        Some(Ok(port)) => Ok((host.to_string(), Some(port))),
        None => Ok((host.to_string(), None)),
    }
}

/// How long one query may take, such as "10s": longer than 0.
pub(super) fn query_timeout(value: &Value) -> Result<Duration, String> {
    let text = value.as_str().ok_or_else(|| format!("expected a duration like \"10s\", got {value}"))?;
    let d = humantime::parse_duration(text).map_err(|e| format!("'{text}' is not a duration like \"10s\" ({e})"))?;
    if d.is_zero() {
        return Err("must be longer than 0".into());
    }
    Ok(d)
}

/// A list of IP addresses (no names: a proxy is trusted by the address it connects from).
pub(super) fn ip_addresses(value: &Value) -> Result<Vec<std::net::IpAddr>, String> {
    strings(value)?.iter().map(|a| a.parse().map_err(|_| format!("{a:?} is not an IP address"))).collect()
}

/// An HTTP header name.
pub(super) fn header_name(value: &Value) -> Result<String, String> {
    let name = string(value)?;
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!("{name:?} is not an HTTP header name"));
    }
    Ok(name)
}

impl Shown for crate::pools::PoolMode {
    fn shown(&self) -> String {
        format!("{:?}", self.as_str())
    }
}

/// A MariaDB URL, `mysql://USER@HOST[:PORT]/DATABASE[?socket=PATH]`, with no password in it (a
/// URL is shown in logs and `config check`: the password goes in a file).
pub(super) fn mariadb_url(value: &Value) -> Result<String, String> {
    let text = string(value)?;
    let Some(rest) = text.strip_prefix("mysql://").or_else(|| text.strip_prefix("mariadb://")) else {
        return Err(format!("must be mysql://USER@HOST/DATABASE (got {text:?})"));
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Some((user, _host)) = authority.rsplit_once('@') else {
        return Err("must name the user accountd connects as: mysql://USER@HOST/DATABASE".into());
    };
    if user.contains(':') {
        return Err("must not hold a password: put it in [ledger] password_file".into());
    }
    let database = path.split('?').next().unwrap_or("");
    if database.is_empty() {
        return Err("must name the database: mysql://USER@HOST/DATABASE".into());
    }
    Ok(format!("mysql://{rest}"))
}
