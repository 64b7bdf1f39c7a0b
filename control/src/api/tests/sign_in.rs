//! Signing in through the API: two-step codes and recovery codes, bounded fields, the sign-in
//! budgets of strangers and of addresses (behind a trusted proxy, IPv6 hosts), the owner's
//! sessions and a password change.

use super::*;

/// Decodes the base32 secret an enrollment shows (what the authenticator app does).
fn base32_decode(text: &str) -> Vec<u8> {
    let (mut out, mut buffer, mut bits) = (Vec::new(), 0u32, 0u32);
    for c in text.bytes() {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'2'..=b'7' => c - b'2' + 26,
            _ => panic!("not base32: {text}"),
        };
        buffer = (buffer << 5) | u32::from(value);
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    out
}

#[tokio::test]
async fn two_step_sign_in_needs_a_fresh_code_or_a_recovery_code() {
    let mut client = Client::signed_in(false).await;
    let code_at = |secret: &[u8], step: u64| format!("{:06}", crate::totp::code_at(secret, step));
    assert_eq!(client.get("/totp").await.json()["enabled"], false);

    let enrollment = client.post("/totp/enroll", json!({})).await.json();
    let uri = enrollment["uri"].as_str().unwrap();
    assert!(uri.starts_with("otpauth://totp/Hearth:owner?secret="), "{uri}");
    assert!(enrollment["qr_svg"].as_str().unwrap().starts_with("<svg"));
    let secret = base32_decode(enrollment["secret"].as_str().unwrap());
    let step = now() / crate::totp::STEP;
    let answer = client.post("/totp/confirm", json!({ "code": "000000" })).await;
    if code_at(&secret, step) != "000000" {
        assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "bad_totp"));
        assert_eq!(client.get("/totp").await.json()["enabled"], false, "a wrong code changes nothing");
    }
    let answer = client.post("/totp/confirm", json!({ "code": code_at(&secret, step) })).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let recovery: Vec<String> =
        answer.json()["recovery_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
    assert_eq!(recovery.len(), crate::totp::RECOVERY_CODES);
    assert_eq!(client.get("/totp").await.json()["recovery_left"], 10);

    // The password alone is not enough any more; a wrong code counts like a wrong password.
    let login = |code: Option<&str>| {
        let mut body = json!({ "login": "owner", "password": "a long password" });
        if let Some(code) = code {
            body["code"] = json!(code);
        }
        body
    };
    let answer = client.post("/login", login(None)).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "totp_required"));
    assert!(!answer.headers.contains_key(header::SET_COOKIE));
    let answer = client.post("/login", login(Some("12345x"))).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_totp"));
    // The code that confirmed the enrollment was used: the next step's code (a phone a little
    // ahead) works, once.
    let next = code_at(&secret, step + 1);
    let answer = client.post("/login", login(Some(&next))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let answer = client.post("/login", login(Some(&next))).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_totp"), "no replay");
    // A recovery code, typed loosely, works once.
    let typed = recovery[3].to_uppercase().replace('-', " ");
    assert_eq!(client.post("/login", login(Some(&typed))).await.status, StatusCode::OK);
    let answer = client.post("/login", login(Some(&recovery[3]))).await;
    assert_eq!(answer.code(), "bad_totp");
    assert_eq!(client.get("/totp").await.json()["recovery_left"], 9);

    // API tokens cannot touch it; turning it off needs the password.
    let token = client.post("/tokens", json!({ "name": "t", "scope": "admin" })).await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut scripted = Client { control: client.control, cookie: None, bearer: Some(token) };
    assert_eq!(scripted.post("/totp/enroll", json!({})).await.status, StatusCode::FORBIDDEN);
    std::mem::swap(&mut scripted.cookie, &mut client.cookie);
    scripted.bearer = None;
    let answer = scripted.post("/totp/disable", json!({ "password": "wrong" })).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_password"));
    assert_eq!(scripted.post("/totp/disable", json!({ "password": "a long password" })).await.status, StatusCode::OK);
    assert_eq!(scripted.post("/login", login(None)).await.status, StatusCode::OK);
    let audit = scripted.get("/audit").await.json();
    let actions: Vec<&str> =
        audit["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for action in ["owner.totp_on", "owner.recovery_code_used", "owner.totp_off"] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }
}

#[tokio::test]
async fn huge_sign_in_fields_are_refused_before_anything_is_counted() {
    let client = Client::signed_in(false).await;
    let lockouts = &client.app().lockouts;
    assert_eq!((lockouts.entries(), lockouts.memory()), (0, 0));
    // 3.9 MB logins, from 60 addresses: refused unread past the sign-in body's size.
    let huge = "x".repeat(3_900_000);
    for i in 0..60 {
        let answer = client
            .login_from(&format!("198.51.100.{i}"), json!({ "login": huge, "password": "not the password" }))
            .await;
        assert_eq!((answer.status, answer.code().as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "too_large"));
    }
    // A login longer than any the owner can have, a password or code too long: a 400 naming
    // the field, neither counted nor hashed.
    for (i, (body, field)) in [
        (json!({ "login": "x".repeat(65), "password": "not the password" }), "login"),
        (json!({ "login": "owner", "password": "x".repeat(257) }), "password"),
        (json!({ "login": "owner", "password": "not the password", "code": "1".repeat(65) }), "code"),
    ]
    .into_iter()
    .cycle()
    .take(60)
    .enumerate()
    {
        let answer = client.login_from(&format!("203.0.113.{i}"), body).await;
        assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "too_long"));
        assert!(answer.json()["error"]["message"].as_str().unwrap().starts_with(field));
    }
    assert_eq!((lockouts.entries(), lockouts.memory()), (0, 0), "nothing was kept");
    assert_eq!(client.app().counters.logins_failed.load(std::sync::atomic::Ordering::Relaxed), 0);
    // The longest login is checked as usual, and counted by a fixed-size key.
    let answer = client.login_from("203.0.113.99", json!({ "login": "x".repeat(64), "password": "nope" })).await;
    assert_eq!(answer.code(), "bad_login");
    assert_eq!(lockouts.entries(), 2, "the address and the login");
    assert!(lockouts.memory() < 4096, "{}", lockouts.memory());
}

/// Turns two-step sign-in on for the signed-in owner; gives the secret and recovery codes.
async fn turn_two_step_on(client: &Client) -> (Vec<u8>, Vec<String>) {
    let enrollment = client.post("/totp/enroll", json!({})).await.json();
    let secret = base32_decode(enrollment["secret"].as_str().unwrap());
    let code = format!("{:06}", crate::totp::code_at(&secret, now() / crate::totp::STEP));
    let answer = client.post("/totp/confirm", json!({ "code": code })).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let recovery =
        answer.json()["recovery_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
    (secret, recovery)
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_is_locked_out_alone() {
    // A reverse proxy at 10.0.0.5 (or anything in 10.0.1.0/24) in front of control.
    let client = Client::signed_in_with(false, &[("HEARTH_TRUSTED_PROXIES", "10.0.0.5, 10.0.1.0/24")]).await;
    let guess = |login: &str| json!({ "login": login, "password": "not the password" });
    let right = json!({ "login": "owner", "password": "a long password" });
    // Ten wrong passwords from one client through the proxy lock that client out...
    for i in 0..10 {
        let login = if i % 2 == 0 { "owner" } else { "someone" };
        let answer = client.login_via("10.0.0.5", &[("x-forwarded-for", "198.51.100.7")], guess(login)).await;
        assert_eq!(answer.code(), "bad_login");
    }
    let answer = client.login_via("10.0.0.5", &[("x-forwarded-for", "198.51.100.7")], right.clone()).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "the guessing client is locked out");
    // ...and no one else behind the same proxy: the owner at another address gets in, whether
    // the proxy names the client in X-Forwarded-For (right-most hop not itself a proxy, over
    // every header line) or CF-Connecting-IP (which wins).
    for headers in [
        [("x-forwarded-for", "198.51.100.7, 203.0.113.9"), ("x-forwarded-for", "10.0.1.20")],
        [("cf-connecting-ip", "203.0.113.10"), ("x-forwarded-for", "198.51.100.7")],
    ] {
        let answer = client.login_via("10.0.0.5", &headers, right.clone()).await;
        assert_eq!(answer.status, StatusCode::OK, "{headers:?}: {}", String::from_utf8_lossy(&answer.body));
    }
    // The locked client cannot pass for someone else by adding hops of its own to the left.
    let answer = client.login_via("10.0.0.5", &[("x-forwarded-for", "203.0.113.9, 198.51.100.7")], right.clone()).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);

    // A client reaching control directly: its forwarding headers are ignored, so changing them
    // neither spreads its guesses over made-up addresses nor frees it once locked.
    for i in 0..10 {
        let forged = format!("192.0.2.{i}");
        let headers = [("x-forwarded-for", forged.as_str()), ("cf-connecting-ip", forged.as_str())];
        assert_eq!(client.login_via("198.51.100.99", &headers, guess("someone")).await.code(), "bad_login");
    }
    let headers = [("x-forwarded-for", "203.0.113.50"), ("cf-connecting-ip", "203.0.113.50")];
    let answer = client.login_via("198.51.100.99", &headers, right.clone()).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "a stranger's headers are not believed");
    // Nor can it lock out the address it names.
    let answer = client.login_from("203.0.113.50", right).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
}

#[tokio::test]
async fn strangers_can_slow_guessing_but_never_keep_the_owner_out() {
    let client = Client::signed_in(false).await;
    let password = |password: &str, code: Option<&str>| {
        let mut body = json!({ "login": "owner", "password": password });
        if let Some(code) = code {
            body["code"] = json!(code);
        }
        body
    };
    // The owner signs in from home once (one check of the budget for unknown addresses): that
    // address is known from then on.
    let answer = client.login_from("192.0.2.1", password("a long password", None)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));

    // 100 wrong passwords for the owner's login from ten other addresses: the login's budget
    // for unknown addresses lets the rest of its 30 be checked, then 429 with the time to wait.
    let mut checked = 0;
    for i in 0..100 {
        let answer = client.login_from(&format!("198.51.100.{}", i / 10), password("a guess", None)).await;
        match answer.status {
            StatusCode::UNAUTHORIZED => checked += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                let retry: u64 = answer.headers[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
                assert!((1..=120).contains(&retry), "{retry}");
            }
            other => panic!("{other}: {}", String::from_utf8_lossy(&answer.body)),
        }
    }
    assert_eq!(checked, crate::auth::LOGIN_CHECKS_PER_HOUR - 1, "guessing from unknown addresses is capped");
    // A new address with the right password: held to the spent budget too.
    let answer = client.login_from("198.51.100.51", password("a long password", None)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    // The owner still gets in from home.
    let answer = client.login_from("192.0.2.1", password("a long password", None)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));

    // With two-step sign-in on, the owner gets in from anywhere with a valid code.
    let (secret, recovery) = turn_two_step_on(&client).await;
    let answer = client.login_from("198.51.100.52", password("a long password", None)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "no code: held to the budget");
    // Wrong codes from unknown addresses take from the budget too: no way around it.
    let answer = client.login_from("198.51.100.50", password("a guess", Some("123456"))).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    let step = now() / crate::totp::STEP;
    let code = format!("{:06}", crate::totp::code_at(&secret, step + 1));
    let answer = client.login_from("203.0.113.7", password("a long password", Some(&code))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let answer = client.login_from("203.0.113.8", password("a long password", Some(&code))).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "a spent code is no way past the budget");
    // A valid code with a wrong password is not spent: the owner mistyping keeps the code.
    let answer = client.login_from("203.0.113.9", password("a typo", Some(&recovery[2]))).await;
    assert_eq!(answer.code(), "bad_login");
    let answer = client.login_from("203.0.113.9", password("a long password", Some(&recovery[2]))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    // From home, the password and a code, as ever.
    let answer = client.login_from("192.0.2.1", password("a long password", None)).await;
    assert_eq!(answer.code(), "totp_required");
    let answer = client.login_from("192.0.2.1", password("a long password", Some(&recovery[0]))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    // Only hashes of the owner's addresses are stored.
    let stored: Vec<Vec<u8>> = client
        .app()
        .db
        .read(|c| {
            Ok(c.prepare("SELECT address_hash FROM known_addresses")?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?)
        })
        .await
        .unwrap();
    for ip in ["192.0.2.1", "203.0.113.7", "203.0.113.9"] {
        assert!(stored.contains(&crate::auth::address_hash(ip.parse().unwrap()).to_vec()), "{ip}");
    }
    assert!(!stored.contains(&crate::auth::address_hash("198.51.100.1".parse().unwrap()).to_vec()));
}

#[tokio::test]
async fn wrong_codes_count_for_their_address_even_past_a_spent_budget() {
    let client = Client::signed_in(false).await;
    let (secret, _) = turn_two_step_on(&client).await;
    let body = |password: &str, code: &str| json!({ "login": "owner", "password": password, "code": code });
    // Strangers spend the owner's login's budget for unknown addresses.
    for i in 0..crate::auth::LOGIN_CHECKS_PER_HOUR {
        let answer = client
            .login_from(&format!("198.51.100.{}", i / 5), json!({ "login": "owner", "password": "a guess" }))
            .await;
        assert_eq!(answer.code(), "bad_login");
    }
    // From one more address, ten wrong codes: each refused by the spent budget, and each
    // counted for the address, which they lock.
    let failed = || client.app().counters.logins_failed.load(std::sync::atomic::Ordering::Relaxed);
    let before = failed();
    for _ in 0..10 {
        let answer = client.login_from("203.0.113.20", body("a guess", "000000")).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(failed() - before, 10, "every wrong code is counted");
    // The confirmation spent this step's code: the next one is valid too.
    let code = format!("{:06}", crate::totp::code_at(&secret, now() / crate::totp::STEP + 1));
    let answer = client.login_from("203.0.113.20", body("a long password", &code)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "the address is locked: no more codes from there");
    // From elsewhere, the owner's valid code still gets in.
    let answer = client.login_from("203.0.113.21", body("a long password", &code)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
}

#[tokio::test]
async fn an_authenticator_code_gets_past_a_spent_budget_once() {
    let client = Client::signed_in(false).await;
    let (secret, recovery) = turn_two_step_on(&client).await;
    let body = |password: &str, code: &str| json!({ "login": "owner", "password": password, "code": code });
    for i in 0..crate::auth::LOGIN_CHECKS_PER_HOUR {
        let answer = client
            .login_from(&format!("198.51.100.{}", i / 5), json!({ "login": "owner", "password": "a guess" }))
            .await;
        assert_eq!(answer.code(), "bad_login");
    }
    // A valid code (say, one found by guessing) buys one password check past the spent budget...
    let code = format!("{:06}", crate::totp::code_at(&secret, now() / crate::totp::STEP + 1));
    let answer = client.login_from("203.0.113.30", body("a guess", &code)).await;
    assert_eq!(answer.code(), "bad_login");
    // ...not more, from anywhere, even with the right password (the owner's next code will do).
    let answer = client.login_from("203.0.113.31", body("another guess", &code)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    let answer = client.login_from("203.0.113.32", body("a long password", &code)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    // A recovery code, which cannot be guessed, still gets the owner in.
    let answer = client.login_from("203.0.113.32", body("a long password", &recovery[0])).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
}

/// The bounds the description gives users, nodes and groups are the ones the API checks: one
/// over is a 400 `too_long` naming the field, at the bound it is not.
#[tokio::test]
async fn the_described_bounds_are_the_ones_checked() {
    let client = Client::signed_in(false).await;
    let doc: Value = serde_json::from_str(super::super::admin::OPENAPI).unwrap();
    let mut checked = 0;
    for (schema, path) in [("UserInput", "/users"), ("NodeInput", "/nodes"), ("GroupInput", "/groups")] {
        for (field, spec) in doc["components"]["schemas"][schema]["properties"].as_object().unwrap() {
            let Some(max) = spec["maxLength"].as_u64().or(spec["maxItems"].as_u64()) else {
                continue;
            };
            let value = |n: u64| {
                let n = n as usize;
                if spec["maxLength"].is_u64() { json!("x".repeat(n)) } else { json!(vec!["g"; n]) }
            };
            let mut cases = vec![(value(max + 1), true), (value(max), false)];
            if let Some(item) = spec["items"]["maxLength"].as_u64() {
                cases.push((json!(["x".repeat(item as usize + 1)]), true));
                cases.push((json!(["x".repeat(item as usize)]), false));
            }
            for (value, over) in cases {
                let answer = client.post(path, json!({ field: value })).await;
                let refused = answer.code() == "too_long";
                assert_eq!(refused, over, "{schema}.{field}: {}", String::from_utf8_lossy(&answer.body));
                if over {
                    assert!(answer.json()["error"]["message"].as_str().unwrap().starts_with(field.as_str()));
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 38, "every bounded field of the three was tried");
}

/// The anonymous budget of an IPv6 address is its /64's: one host holds a /64, and its
/// addresses do not each get a budget of their own.
#[tokio::test]
async fn an_ipv6_hosts_addresses_share_one_anonymous_budget() {
    let client = Client::new(false);
    let app = client.app();
    let host = |n: u16| std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 1, 0, 0, 0, n));
    let burst = crate::app::ANONYMOUS_BUDGET.burst;
    for n in 0..burst as u16 {
        assert!(app.spend(host(n)).is_ok(), "spend {n} of the burst");
    }
    assert!(app.spend(host(9999)).is_err(), "another address of the same /64 got a budget of its own");
    let neighbour = std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 1));
    assert!(app.spend(neighbour).is_ok(), "the next /64 is another host's");
}

/// The owner sees each session (address, browser, the asking one marked) and ends one, or all
/// the others; an ended session's cookie is refused.
#[tokio::test]
async fn the_owner_sees_and_ends_sessions() {
    let client = Client::signed_in(false).await;
    let sign_in = |ip: &'static str, agent: &'static str| {
        let client = &client;
        async move {
            let body = json!({ "login": "owner", "password": "a long password" });
            let answer = client.login_via(ip, &[("user-agent", agent)], body).await;
            assert_eq!(answer.status, StatusCode::OK);
            cookie_of(&answer.headers)
        }
    };
    let with_cookie = |cookie: String| {
        let client = &client;
        async move {
            let request = Request::get(client.admin("/me"))
                .header(header::COOKIE, format!("{}={cookie}", crate::auth::COOKIE))
                .body(HttpBody::empty())
                .unwrap();
            client.raw(request).await.status
        }
    };
    let phone = sign_in("198.51.100.7", "Mozilla/5.0 (Android 15) Firefox/140.0").await;
    let list = client.get("/sessions").await.json();
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{list}");
    let other = sessions.iter().find(|s| s["current"] == false).unwrap();
    assert_eq!(
        (other["address"].as_str(), other["browser"].as_str()),
        (Some("198.51.100.7"), Some("Mozilla/5.0 (Android 15) Firefox/140.0"))
    );
    assert!(sessions.iter().any(|s| s["current"] == true));
    assert!(!list.to_string().contains(&phone), "no cookie in the list");
    assert_eq!(with_cookie(phone.clone()).await, StatusCode::OK);
    let id = other["id"].as_i64().unwrap();
    let path = client.admin(&format!("/sessions/{id}"));
    assert_eq!(client.send(Method::DELETE, &path, None, &[]).await.status, StatusCode::NO_CONTENT);
    assert_eq!(with_cookie(phone).await, StatusCode::UNAUTHORIZED, "an ended session is refused");
    assert_eq!(client.send(Method::DELETE, &path, None, &[]).await.status, StatusCode::NOT_FOUND);
    // Everywhere else: the others end, the asking one stays.
    let laptop = sign_in("203.0.113.9", "Mozilla/5.0 (X11; Linux x86_64) Chrome/142.0").await;
    let tablet = sign_in("203.0.113.10", "Mozilla/5.0 (iPad) Safari/605.1").await;
    let ended = client.send(Method::DELETE, &client.admin("/sessions"), None, &[]).await.json();
    assert_eq!(ended["ended"], 2);
    assert_eq!(
        (with_cookie(laptop).await, with_cookie(tablet).await),
        (StatusCode::UNAUTHORIZED, StatusCode::UNAUTHORIZED)
    );
    assert_eq!(client.get("/me").await.status, StatusCode::OK);
    assert_eq!(client.get("/sessions").await.json()["sessions"].as_array().unwrap().len(), 1);
}

/// An admin changes their own password with the current one: a wrong current one counts as a
/// failed sign-in, the new one keeps the rules, every other session ends, a token cannot.
#[tokio::test]
async fn a_password_is_changed_with_the_current_one_and_other_sessions_end() {
    let mut client = Client::signed_in(false).await;
    let login = |password: &str| json!({ "login": "owner", "password": password });
    let elsewhere = client.post("/login", login("a long password")).await;
    let other = Client { control: client.control.clone(), cookie: Some(cookie_of(&elsewhere.headers)), bearer: None };
    assert_eq!(other.get("/me").await.status, StatusCode::OK);

    let wrong = client.post("/password", json!({ "current": "not it at all", "new": "another long one" })).await;
    assert_eq!((wrong.status, wrong.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_current"));
    assert_eq!(wrong.json()["tries_left"], 9, "a wrong current password counts as a failed sign-in");
    let short = client.post("/password", json!({ "current": "a long password", "new": "short" })).await;
    assert_eq!((short.status, short.code().as_str()), (StatusCode::BAD_REQUEST, "bad_password"));
    let same = client.post("/password", json!({ "current": "a long password", "new": "a long password" })).await;
    assert_eq!(same.code(), "same_password");
    let token = client.post("/tokens", json!({ "name": "t", "scope": "admin" })).await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let scripted = Client { control: client.control.clone(), cookie: None, bearer: Some(token) };
    let by_token = scripted.post("/password", json!({ "current": "a long password", "new": "another long one" })).await;
    assert_eq!((by_token.status, by_token.code().as_str()), (StatusCode::FORBIDDEN, "session_only"));

    let changed = client.post("/password", json!({ "current": "a long password", "new": "another long one" })).await;
    assert_eq!(changed.status, StatusCode::OK, "{}", String::from_utf8_lossy(&changed.body));
    assert_eq!(changed.json()["sessions_ended"], 1);
    assert_eq!(other.get("/me").await.status, StatusCode::UNAUTHORIZED, "the other session ended");
    assert_eq!(client.get("/me").await.status, StatusCode::OK, "this one goes on");
    assert_eq!(client.post("/login", login("a long password")).await.code(), "bad_login");
    let again = client.post("/login", login("another long one")).await;
    assert_eq!(again.status, StatusCode::OK);
    client.cookie = Some(cookie_of(&again.headers));
    let audit = client.get("/audit").await.json().to_string();
    assert!(audit.contains("password.change") && !audit.contains("another long one"), "{audit}");
}
