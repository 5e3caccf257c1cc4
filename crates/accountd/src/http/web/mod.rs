//! The status page on accountd's HTTP listener (`/web/`): a user's balance, history and forecast,
//! and for admins every user, usage, preemptions, drained GPUs and cycle health. The page and its
//! script are embedded in the binary; its data comes from `/web/api/*` as JSON and follows
//! sbalance's rules (a user sees only their own data unless `balances_public`; admins see all).
//!
//! Who is asking: a session cookie, started by a one-time login link that `sbalance --web` got
//! over the Unix socket (the kernel named its user), or, from a `[web] trusted_proxies` address
//! only, the proxy's `user_header`.

mod pages;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use gputokens::access::Caller;

use crate::answering::Answering;
use crate::http::state::AppState;
use crate::logins::Refused;

/// The session cookie: over https a `__Host-` cookie (Secure, the whole host, settable by no
/// subdomain or plain-http page), over plain http (`allow_http`) one limited to /web.
const COOKIE: &str = "gputokens_session";
const HOST_COOKIE: &str = "__Host-gputokens_session";

/// (cookie name, its attributes) for the page's address.
fn cookie_kind(config: &gputokens::Config) -> (&'static str, &'static str) {
    // The page is https where [web] url says so, or, without one, where the listener has TLS itself.
    let https = match config.web.url.as_deref() {
        Some(url) => url.starts_with("https://"),
        None => config.http.tls.is_some(),
    };
    match https {
        true => (HOST_COOKIE, "Path=/; Secure; HttpOnly; SameSite=Lax"),
        false => (COOKIE, "Path=/web; HttpOnly; SameSite=Lax"),
    }
}
const INDEX: &str = include_str!("../../../assets/web/index.html");
const SCRIPT: &str = include_str!("../../../assets/web/app.js");
const STYLE: &str = include_str!("../../../assets/web/app.css");
/// No script but ours, nothing loaded from elsewhere, never framed.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                      base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/web", get(|| async { redirect("/web/") }))
        .route("/web/", get(|| async { asset("text/html; charset=utf-8", INDEX) }))
        .route("/web/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/web/app.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/web/login", get(login_page).post(login))
        .route("/web/logout", axum::routing::post(logout))
        .route("/web/api/me", get(me))
        .route("/web/api/admin", get(admin))
}

fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    secured(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

fn redirect(to: &'static str) -> Response {
    secured((StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response())
}

/// A page of plain text for a refused login: nothing of the request is echoed.
pub(super) fn refused_page(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><meta charset=\"utf-8\"><title>gputokens</title><link rel=\"stylesheet\" href=\"/web/app.css\">\
         <main><h1>gputokens</h1><p class=\"refused\">{}.</p><p>Run <code>sbalance --web</code> on a login node for a new link.</p></main>",
        escape(message)
    );
    secured((status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response())
}

/// HTML-escapes `text` (for the few server-made pages; the script sets text, never HTML).
pub fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '&' => "&amp;".into(),
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '"' => "&quot;".into(),
            '\'' => "&#39;".into(),
            c => c.to_string(),
        })
        .collect()
}

#[derive(serde::Deserialize)]
struct LoginQuery {
    token: Option<String>,
}

/// A login link opened: a page that names whom it logs in as, with the button that does (a POST
/// from this page). Opening the link alone logs no one in, so another site cannot log a visitor
/// into its own session (login CSRF: the old audit's L2); the link stays unused.
async fn login_page(State(state): State<Arc<AppState>>, Query(query): Query<LoginQuery>) -> Response {
    let work = tokio::task::spawn_blocking(move || {
        let now = gputokens::time::now();
        let s = crate::answering::lock(&state.answering);
        let token = query.token.filter(|t| valid_token(t));
        token.ok_or(Refused::Unknown).and_then(|t| s.logins.link_of(&t, now).map(|visitor| (t, visitor)))
    });
    match work.await {
        Ok(Ok((token, visitor))) => {
            let body = format!(
                "<!doctype html><meta charset=\"utf-8\"><title>gputokens</title><link rel=\"stylesheet\" href=\"/web/app.css\">\
                 <main><h1>gputokens</h1><form method=\"post\" action=\"/web/login\">\
                 <p>Log in to the status page as <b id=\"login-name\">{}</b>?</p>\
                 <input type=\"hidden\" name=\"token\" value=\"{token}\"><button id=\"login\" type=\"submit\">Log in</button>\
                 </form><p>Only a link you made yourself with <code>sbalance --web</code> shows your own name here.</p></main>",
                escape(&visitor.name)
            );
            secured(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response())
        }
        Ok(Err(refused)) => refused_page(StatusCode::UNAUTHORIZED, refused.message()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// A login token as links carry them: 64 hex digits (anything else is never echoed).
fn valid_token(token: &str) -> bool {
    token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The login page's button: redeems the link (once) and starts the session, for a POST from the
/// page itself only.
async fn login(State(state): State<Arc<AppState>>, headers: HeaderMap, Form(form): Form<LoginQuery>) -> Response {
    // The service's lock may be held by a cycle for a while: never wait for it on the runtime.
    let work = tokio::task::spawn_blocking(move || {
        let now = gputokens::time::now();
        let mut s = crate::answering::lock(&state.answering);
        if !from_this_site(&headers, &s.res.config.web) {
            return None;
        }
        let ttl = s.res.config.web.session_ttl;
        let kind = cookie_kind(&s.res.config);
        let token = form.token.filter(|t| valid_token(t));
        let redeemed = token.ok_or(Refused::Unknown).and_then(|t| s.logins.redeem(&t, now, ttl));
        Some((redeemed, ttl, kind))
    });
    let (redeemed, ttl, (name, attributes)) = match work.await {
        Ok(Some(outcome)) => outcome,
        Ok(None) => {
            return refused_page(StatusCode::FORBIDDEN, "a login must come from the login link's own page");
        }
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    match redeemed {
        Ok((session, visitor, _)) => {
            tracing::info!("status page: {} logged in with a link", visitor.name);
            let cookie = format!("{name}={session}; {attributes}; Max-Age={}", ttl.as_secs());
            let mut response = redirect("/web/");
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(refused) => refused_page(StatusCode::UNAUTHORIZED, refused.message()),
    }
}

/// Logs out: a POST from the page itself (its Origin is this site), so another site cannot end a
/// user's session behind their back.
async fn logout(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let ended = tokio::task::spawn_blocking(move || {
        let mut s = crate::answering::lock(&state.answering);
        if !from_this_site(&headers, &s.res.config.web) {
            return None;
        }
        let kind = cookie_kind(&s.res.config);
        if let Some(token) = session_cookie(&headers, kind.0) {
            s.logins.end(&token);
        }
        Some(kind)
    });
    let (name, attributes) = match ended.await {
        Ok(Some(kind)) => kind,
        Ok(None) => return refused_page(StatusCode::FORBIDDEN, "Log out from the status page itself"),
        Err(_) => return (StatusCode::INTERNAL_SERVER_ERROR, "logout failed").into_response(),
    };
    let mut response = refused_page(StatusCode::OK, "You are logged out");
    let gone = format!("{name}=; {attributes}; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&gone) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Whether the request comes from this site's own page: a browser says so in Sec-Fetch-Site (its
/// Origin is "null" under the page's no-referrer policy); otherwise its Origin must be the host
/// it was sent to, or `[web] url`'s.
fn from_this_site(headers: &HeaderMap, web: &gputokens::config::Web) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() == b"same-origin";
    }
    let authority = |url: &str| url.split_once("://").map(|(_, rest)| rest.split('/').next().unwrap_or("").to_string());
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()).and_then(authority) else {
        return false;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    host == Some(origin.as_str()) || web.url.as_deref().and_then(authority).as_deref() == Some(origin.as_str())
}

fn session_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('=').map(str::to_string))
}

/// The header in which a trusted proxy proves it is the proxy (`[web] proxy_secret_file`).
pub const PROXY_SECRET_HEADER: &str = "X-Gputokens-Proxy-Secret";

/// Who a request comes from, before they are looked up.
enum Visitor {
    /// Named by a trusted proxy.
    Named(String),
    /// Logged in with `sbalance --web`.
    Uid(u32),
}

impl Visitor {
    /// The caller, looked up in the name service (a directory server): with the answering lock
    /// released (the audit's L1).
    fn caller(self, config: &gputokens::Config) -> Caller {
        match self {
            Visitor::Named(name) => Caller::named(&name, config),
            Visitor::Uid(uid) => Caller::identify(uid, config),
        }
    }
}

/// Who is asking: the trusted proxy's user header, else the session.
fn visitor(
    s: &mut Answering,
    peer: SocketAddr,
    headers: &HeaderMap,
    proxy_secret: Option<&str>,
    now: i64,
) -> Result<Visitor, (StatusCode, String)> {
    if let Some(name) = proxied_user(&s.res.config.web, peer, headers, proxy_secret)? {
        return Ok(Visitor::Named(name));
    }
    let token = session_cookie(headers, cookie_kind(&s.res.config).0)
        .ok_or((StatusCode::UNAUTHORIZED, "not logged in: run `sbalance --web` and open the link it prints".into()))?;
    let visitor = s
        .logins
        .session(&token, now)
        .map_err(|r| (StatusCode::UNAUTHORIZED, format!("{}: run `sbalance --web` again", session_refusal(r))))?;
    Ok(Visitor::Uid(visitor.uid))
}

/// The user a trusted proxy names: only from a `trusted_proxies` address (an IPv4 peer seen as
/// IPv6-mapped counts as itself) that also sends the proxy secret; one user header, not two.
fn proxied_user(
    web: &gputokens::config::Web,
    peer: SocketAddr,
    headers: &HeaderMap,
    proxy_secret: Option<&str>,
) -> Result<Option<String>, (StatusCode, String)> {
    let address = peer.ip().to_canonical();
    let Some(secret) = proxy_secret.filter(|_| web.trusted_proxies.contains(&address)) else { return Ok(None) };
    let mut names = headers.get_all(web.user_header.as_str()).iter();
    let Some(name) = names.next() else { return Ok(None) };
    if names.next().is_some() {
        return Err((StatusCode::BAD_REQUEST, format!("more than one {} header", web.user_header)));
    }
    let presented = headers.get(PROXY_SECRET_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if headers.get_all(PROXY_SECRET_HEADER).iter().count() != 1
        || !gputokens_node_report::auth::same_secret(presented, secret)
    {
        return Err((StatusCode::UNAUTHORIZED, format!("a {} header without the proxy's secret", web.user_header)));
    }
    let name = name.to_str().map_err(|_| (StatusCode::BAD_REQUEST, format!("{} is not text", web.user_header)))?;
    match name.trim() {
        "" => Ok(None),
        name => Ok(Some(name.to_string())),
    }
}

fn session_refusal(refused: Refused) -> &'static str {
    match refused {
        Refused::Unknown => "your session is not known (accountd may have restarted)",
        Refused::Expired => "your session has expired",
    }
}

#[derive(serde::Deserialize)]
struct UserQuery {
    user: Option<String>,
}

async fn me(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<UserQuery>,
) -> Response {
    let asked = query.user.clone();
    let named = query.user.clone();
    let view = move |s: &mut Answering, caller: &Caller, now, users: &crate::balance_row::SystemUsers| {
        let user = query.user.unwrap_or_else(|| caller.name.clone());
        if !caller.may_view(&user, &s.res.config) {
            return Err((StatusCode::FORBIDDEN, format!("{} may not see the data of '{user}'", caller.name)));
        }
        let mut view = pages::user_view(&s.res, &user, now, users).map_err(|e| (StatusCode::NOT_FOUND, e))?;
        view["viewer"] = serde_json::json!({ "name": caller.name, "admin": caller.admin });
        // The pools the viewer may see (with pools on), as `sbalance -l` shows them.
        if s.res.config.accounts.mode != gputokens::pools::PoolMode::User {
            if let Ok((gputokens::protocol::Reply::Pools { rows, .. }, _)) =
                crate::socket::pools::list(s, caller, None, now)
            {
                view["pools"] = serde_json::to_value(rows).unwrap_or_default();
            }
        }
        Ok(view)
    };
    // Shadow mode: the viewed user's own count, for that user and admins only (balances_public lets
    // others see her balance, not whom the plugins would have refused).
    let shadow = move |config: &gputokens::Config, caller: &Caller, now| {
        let name = asked.unwrap_or_else(|| caller.name.clone());
        if name != caller.name && !caller.admin {
            return None;
        }
        let uid = match name == caller.name {
            true => Some(caller.uid).filter(|uid| *uid != u32::MAX),
            false => nix::unistd::User::from_name(&name).ok().flatten().map(|u| u.uid.as_raw()),
        };
        crate::shadow_view::view(config, crate::shadow_view::Scope::User { name: &name, uid }, now)
    };
    json_view(state, peer, headers, named, view, shadow).await
}

async fn admin(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let view = move |s: &mut Answering, caller: &Caller, now, _: &crate::balance_row::SystemUsers| {
        if !caller.admin {
            return Err((StatusCode::FORBIDDEN, format!("{} is not a gputokens admin", caller.name)));
        }
        let mut view = pages::admin_view(s, now).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))?;
        view["viewer"] = serde_json::json!({ "name": caller.name, "admin": true });
        Ok(view)
    };
    let shadow = |config: &gputokens::Config, _: &Caller, now| {
        crate::shadow_view::view(config, crate::shadow_view::Scope::Everyone, now)
    };
    json_view(state, peer, headers, None, view, shadow).await
}

/// Runs `view` for the request's caller on the service off the async runtime (it reads the ledger)
/// and answers its JSON, with `shadow` (shadow mode's counts, read and named with the answering
/// lock released) as its `shadow` field when there are any. The caller and the user `named` are
/// looked up in the system's user database before the answering lock is taken again.
async fn json_view<F, S>(
    state: Arc<AppState>,
    peer: SocketAddr,
    headers: HeaderMap,
    named: Option<String>,
    view: F,
    shadow: S,
) -> Response
where
    F: FnOnce(
            &mut Answering,
            &Caller,
            i64,
            &crate::balance_row::SystemUsers,
        ) -> Result<serde_json::Value, (StatusCode, String)>
        + Send
        + 'static,
    S: FnOnce(&gputokens::Config, &Caller, i64) -> Option<gputokens::protocol::ShadowView> + Send + 'static,
{
    let work = tokio::task::spawn_blocking(move || {
        let now = gputokens::time::now();
        let (visitor, config) = {
            let mut s = crate::answering::lock(&state.answering);
            (visitor(&mut s, peer, &headers, state.proxy_secret.as_deref(), now), s.res.config.clone())
        };
        let caller = visitor?.caller(&config);
        let users = crate::balance_row::SystemUsers::looked_up(std::iter::once(&caller.name).chain(named.as_ref()));
        let mut value = view(&mut crate::answering::lock(&state.answering), &caller, now, &users)?;
        if let Some(found) = shadow(&config, &caller, now) {
            value["shadow"] = serde_json::to_value(found).unwrap_or_default();
        }
        Ok(value)
    });
    let response = match work.await {
        Ok(Ok(value)) => Json(value).into_response(),
        Ok(Err((status, message))) => (status, Json(serde_json::json!({ "error": message }))).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    secured(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_html_would_read() {
        assert_eq!(
            escape("<script>\"o'neil\" & co</script>"),
            "&lt;script&gt;&quot;o&#39;neil&quot; &amp; co&lt;/script&gt;"
        );
        assert_eq!(escape("ann@example.org ünï"), "ann@example.org ünï");
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; gputokens_session=abc; b=2"));
        assert_eq!(session_cookie(&headers, COOKIE).as_deref(), Some("abc"));
        assert_eq!(session_cookie(&headers, HOST_COOKIE), None, "over https only the __Host- cookie counts");
        headers.insert(header::COOKIE, HeaderValue::from_static("gputokens_sessionx=abc"));
        assert_eq!(session_cookie(&headers, COOKIE), None);
        headers.insert(header::COOKIE, HeaderValue::from_static("__Host-gputokens_session=xyz"));
        assert_eq!(session_cookie(&headers, COOKIE), None);
        assert_eq!(session_cookie(&headers, HOST_COOKIE).as_deref(), Some("xyz"));
    }
}

#[cfg(test)]
mod proxy_tests {
    use super::*;

    fn web() -> gputokens::config::Web {
        gputokens::config::Web { trusted_proxies: vec!["10.0.0.5".parse().unwrap()], ..Default::default() }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_proxy_is_its_address_in_either_form_and_its_secret() {
        let proxied = [("X-Remote-User", "alice"), (PROXY_SECRET_HEADER, "s3cret")];
        for peer in ["10.0.0.5:40000", "[::ffff:10.0.0.5]:40000"] {
            let found = proxied_user(&web(), peer.parse().unwrap(), &headers(&proxied), Some("s3cret"));
            assert_eq!(found, Ok(Some("alice".to_string())), "{peer}");
        }
        let elsewhere = proxied_user(&web(), "10.0.0.6:1".parse().unwrap(), &headers(&proxied), Some("s3cret"));
        assert_eq!(elsewhere, Ok(None), "another address: its header is ignored");
        let unset = proxied_user(&web(), "10.0.0.5:1".parse().unwrap(), &headers(&proxied), None);
        assert_eq!(unset, Ok(None), "no secret configured: no proxy trusted");
        let two_secrets = [("X-Remote-User", "alice"), (PROXY_SECRET_HEADER, "s3cret"), (PROXY_SECRET_HEADER, "x")];
        let refused = proxied_user(&web(), "10.0.0.5:1".parse().unwrap(), &headers(&two_secrets), Some("s3cret"));
        assert_eq!(refused.map_err(|e| e.0), Err(StatusCode::UNAUTHORIZED));
    }
}
