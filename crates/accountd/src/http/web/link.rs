//! The login link `sbalance --web` prints, made for whoever asked over the Unix socket (the kernel
//! says who), pointing at the status page's address.

use gputokens::access::Caller;

use super::logins::Visitor;
use crate::answering::Answering;

/// The link `sbalance --web` prints: made for `caller`, who asked over the Unix socket.
pub fn login_link(answering: &mut Answering, caller: &Caller, now: i64) -> Result<(String, i64), String> {
    let base = base_url(answering)?;
    let visitor = Visitor { uid: caller.uid, name: caller.name.clone() };
    let ttl = answering.res.config.web.link_ttl;
    let (token, expires) = answering.logins.issue_link(visitor, now, ttl).map_err(|e| e.to_string())?;
    Ok((format!("{base}/web/login?token={token}"), expires))
}

/// `[web] url`, else this host on the HTTP listener's port; a plain-http one only with `allow_http`.
fn base_url(answering: &Answering) -> Result<String, String> {
    let web = &answering.res.config.web;
    if let Some(url) = web.url.as_ref().filter(|u| u.starts_with("https://") || web.allow_http) {
        return Ok(url.clone());
    }
    if !web.allow_http {
        return Err(format!(
            "the status page has no https address: set [web] url to the https:// address of a TLS proxy in front of \
             accountd{} (or allow_http = true, and sessions travel in clear)",
            web.url.as_deref().map(|u| format!(" (it is {u})")).unwrap_or_default()
        ));
    }
    let addr =
        answering.http_address.ok_or("the status page needs accountd serve's HTTP listener ([http] listen is off)")?;
    let host = if addr.ip().is_unspecified() {
        nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into())
    } else {
        match addr.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        }
    };
    Ok(format!("http://{host}:{}", addr.port()))
}
