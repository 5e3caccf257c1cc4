//! The login link `sbalance --web` prints (the `WebLogin` request), made for whoever asked over the
//! Unix socket (the kernel says who), pointing at the status page's address. The link is kept in
//! the answering state's [`Logins`](crate::logins::Logins); the page (`http::web`) redeems it.

use gputokens::access::Caller;

use crate::answering::Answering;
use crate::logins::Visitor;

/// The link `sbalance --web` prints: made for `caller`, who asked over the Unix socket or with MUNGE.
pub fn login_link(answering: &mut Answering, caller: &Caller, now: i64) -> Result<(String, i64), String> {
    let base = base_url(answering).map_err(|problem| match caller.admin {
        true => problem,
        // A user cannot fix the site's config: they are told so, and whom to ask.
        false => format!(
            "the status page is not set up for browsers on this site yet; {} (they can set [web] url)",
            gputokens::decision::rules::ask_for_tokens(answering.res.config.admission.contact.as_deref()).replacen(
                "for tokens",
                "about it",
                1
            )
        ),
    })?;
    let visitor = Visitor { uid: caller.uid, name: caller.name.clone() };
    let ttl = answering.res.config.web.link_ttl;
    let (token, expires) = answering.logins.issue_link(visitor, now, ttl).map_err(|e| e.to_string())?;
    Ok((format!("{base}/web/login?token={token}"), expires))
}

/// `[web] url`, else this host on the HTTP listener's port: https where the listener has TLS, plain
/// http only with `allow_http`.
fn base_url(answering: &Answering) -> Result<String, String> {
    let web = &answering.res.config.web;
    if let Some(url) = web.url.as_ref().filter(|u| u.starts_with("https://") || web.allow_http) {
        return Ok(url.clone());
    }
    let tls = answering.res.config.http.tls.is_some();
    if !web.allow_http && !tls {
        return Err(format!(
            "the status page has no https address: set [web] url to the https:// address of a TLS proxy in front of \
             accountd{}, give the listener a certificate ([http] tls_certificate), or set allow_http = true (and \
             sessions travel in clear)",
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
    let scheme = if tls { "https" } else { "http" };
    Ok(format!("{scheme}://{host}:{}", addr.port()))
}
