//! The owner's Telegram bot, end to end: the real control binary against a local stand-in of
//! the Bot API (`hearth_tests::telegram`, which checks every request against the Bot API's
//! documented methods and fields). The bot is checked when saved, a burst of events is one
//! message, commands work from the owner's chat only, nothing is lost across a restart, and
//! users are told of their own expiry. People bind their own chats from their subscription
//! page (served by a real native edge) and see only their own.

use std::time::Duration;

use hearth_tests::control::{ControlDir, ControlProcess};
use hearth_tests::eventually;
use hearth_tests::telegram::{BotApi, OWNER, SECOND_CHAT, STRANGER, TOKEN, USER_CHAT};
use reqwest::Method;
use serde_json::{Value, json};

#[tokio::test]
async fn the_owners_bot_tells_events_and_takes_commands() {
    let bot = BotApi::start().await;
    let api = bot.url.clone();
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let env = [("HEARTH_TELEGRAM_API", api.clone())];
    let control = ControlProcess::start(&dir, &env).unwrap();
    let http = dir.client().unwrap();
    let token = control.setup(&http, "admin").await.unwrap();

    // Checked when saved: a wrong token, a malformed one, a chat that does not exist.
    for (body, says) in [
        (json!({ "token": "123456789:AAwrong", "chat_id": OWNER }), "Unauthorized"),
        (json!({ "token": "not a token", "chat_id": OWNER }), "a bot token is"),
        (json!({ "token": TOKEN, "chat_id": 1 }), "chat not found"),
        (json!({ "token": TOKEN, "chat_id": OWNER, "lang": "xx" }), "lang must be"),
    ] {
        let refused = control.call(&http, &token, Method::PUT, "/telegram", Some(&body)).await.unwrap_err();
        assert!(refused.to_string().contains(says), "{body}: {refused}");
    }
    assert_eq!(control.call(&http, &token, Method::GET, "/telegram", None).await.unwrap()["telegram"], Value::Null);
    let set = json!({ "token": TOKEN, "chat_id": OWNER, "lang": "en" });
    let saved = control.call(&http, &token, Method::PUT, "/telegram", Some(&set)).await.unwrap();
    assert_eq!(saved["telegram"]["bot_name"], "hearth_test_bot");
    assert!(!saved.to_string().contains("AAHearth"), "the token never comes back");
    assert!(bot.sent_to(OWNER)[0].starts_with("Hearth is connected: @hearth_test_bot"));

    // A burst of events is one message.
    for name in ["ann", "bob", "<cat>"] {
        control.call(&http, &token, Method::POST, "/users", Some(&json!({ "name": name }))).await.ok();
    }
    eventually("the burst told", Duration::from_secs(20), || async { bot.sent_to(OWNER).len() >= 2 }).await;
    let told = bot.sent_to(OWNER)[1].clone();
    assert!(told.starts_with("👤 New user ann\n👤 New user bob"), "{told}");

    // Commands, from the owner's chat only.
    bot.write(STRANGER, "/disable bob");
    bot.write(OWNER, "/user ann");
    bot.write(OWNER, "/disable ann");
    bot.write(OWNER, "/extend bob 30");
    bot.write(OWNER, "/status");
    bot.write(OWNER, "/enable nobody");
    bot.write(OWNER, "hello");
    eventually("the commands answered", Duration::from_secs(20), || async {
        bot.sent_to(OWNER).iter().any(|t| t.starts_with("No user is named nobody"))
    })
    .await;
    let answers = bot.sent_to(OWNER);
    let ann = answers.iter().find(|t| t.starts_with("ann (active)")).expect("/user ann");
    assert!(
        ann.contains("Traffic: 0 B / ∞") && ann.contains("://") && ann.contains('▀'),
        "the link and its QR code: {ann}"
    );
    assert!(answers.iter().any(|t| t == "ann: disabled"), "{answers:?}");
    assert!(answers.iter().any(|t| t.starts_with("bob: 20")), "extended to a date: {answers:?}");
    assert!(answers.iter().any(|t| t.starts_with("Users — ")), "{answers:?}");
    assert!(bot.sent_to(STRANGER).is_empty(), "a stranger is not answered");
    let users = control.call(&http, &token, Method::GET, "/users", None).await.unwrap();
    let status =
        |name: &str| users["users"].as_array().unwrap().iter().find(|u| u["name"] == name).unwrap()["status"].clone();
    assert_eq!((status("ann"), status("bob")), (json!("disabled"), json!("active")));
    eventually("the disable told", Duration::from_secs(20), || async {
        bot.sent_to(OWNER).iter().any(|t| t.contains("⛔ ann disabled"))
    })
    .await;

    // Control stops; a user is added from the shell meanwhile: told once control is back, and
    // no command runs twice.
    control.stop().unwrap();
    let before = bot.sent_to(OWNER).len();
    dir.cli(&["user", "add", "dan"]).unwrap();
    let control = ControlProcess::start(&dir, &env).unwrap();
    eventually("dan told", Duration::from_secs(20), || async {
        bot.sent_to(OWNER).iter().any(|t| t.contains("👤 New user dan"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after: Vec<String> = bot.sent_to(OWNER)[before..].to_vec();
    assert!(!after.iter().any(|t| t == "ann: disabled"), "commands are not run again: {after:?}");

    // Users with a chat of their own are told of their expiry, in the owner's language.
    let bob = users["users"].as_array().unwrap().iter().find(|u| u["name"] == "bob").unwrap()["id"].as_u64().unwrap();
    control
        .call(&http, &token, Method::PUT, &format!("/users/{bob}/telegram"), Some(&json!({ "chat_id": USER_CHAT })))
        .await
        .unwrap();
    let shown = control.call(&http, &token, Method::GET, &format!("/users/{bob}"), None).await.unwrap();
    assert_eq!(shown["telegram_id"], USER_CHAT);
    let set = json!({ "token": TOKEN, "chat_id": OWNER, "lang": "ru", "tell_users": true, "events": ["node.*"] });
    control.call(&http, &token, Method::PUT, "/telegram", Some(&set)).await.unwrap();
    assert!(bot.sent_to(OWNER).last().unwrap().starts_with("Hearth подключён"));
    let soon = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 2 * 86_400;
    control
        .call(&http, &token, Method::PATCH, &format!("/users/{bob}"), Some(&json!({ "expires_at": soon })))
        .await
        .unwrap();
    eventually("bob told", Duration::from_secs(20), || async { !bot.sent_to(USER_CHAT).is_empty() }).await;
    assert!(bot.sent_to(USER_CHAT)[0].starts_with("Ваш доступ к VPN заканчивается 20"), "{:?}", bot.sent_to(USER_CHAT));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(bot.sent_to(USER_CHAT).len(), 1, "told once");
    assert!(!bot.sent_to(OWNER).last().unwrap().contains("изменён"), "the owner's filter (node.*) holds");
    let refused = bot.refused();
    assert!(refused.iter().all(|r| r.contains("Unauthorized") || r.contains("chat not found")), "{refused:?}");
    control.call(&http, &token, Method::DELETE, "/telegram", None).await.unwrap();
    control.stop().unwrap();
}

/// The bot's link on a subscription page as a browser in `lang` gets it from the edge: its
/// `start` parameter, once the edge has the page with it (`None`: the page has no link).
async fn page_link(http: &reqwest::Client, link: &str, lang: &str) -> Option<String> {
    let page = http
        .get(link)
        .header("user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36")
        .header("accept-language", lang)
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let at = page.find("https://t.me/hearth_test_bot?start=")? + "https://t.me/hearth_test_bot?start=".len();
    Some(page[at..].split('"').next()?.to_owned())
}

/// People bind their own chats with the one-time link on their subscription page, in the
/// page's language: a used link binds nobody else; a chat sees its own user's usage, link and
/// QR code and nobody else's; a chat nobody bound gets nothing; reminders come once each in
/// the person's language, through Telegram's 429 and a gateway's 502; /stop unbinds; the
/// owner turning the bot off for users takes the link off the pages.
#[tokio::test]
async fn people_bind_their_own_chats_from_their_page_and_see_only_their_own() {
    let bot = BotApi::start().await;
    let temp = tempfile::tempdir().unwrap();
    let stack = hearth_tests::control::WithEdge::start_with(temp.path(), &[("HEARTH_TELEGRAM_API", bot.url.clone())])
        .await
        .unwrap();
    let (api, control) = (&stack.api, &stack.control);
    let set = json!({ "token": TOKEN, "chat_id": OWNER, "lang": "en", "tell_users": true, "events": ["node.*"] });
    api.ok(control, Method::PUT, "/telegram", Some(set)).await;
    let ann = api.post(control, "/users", json!({ "name": "ann" })).await["id"].as_u64().unwrap();
    let ben = api.post(control, "/users", json!({ "name": "ben" })).await["id"].as_u64().unwrap();
    let link_of = |id: u64| async move {
        api.get(control, &format!("/users/{id}/link")).await["link"].as_str().unwrap().to_owned()
    };
    let (ann_link, ben_link) = (link_of(ann).await, link_of(ben).await);
    let browser = reqwest::Client::new();
    let started = std::time::Instant::now();
    let ann_start = loop {
        if let Some(start) = page_link(&browser, &ann_link, "fa").await {
            break start;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "ann's page never linked the bot");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(ann_start.starts_with(&format!("{ann}-")) && ann_start.ends_with("-fa"), "{ann_start}");

    // Ann opens it in Persian: bound, welcomed in Persian with her usage.
    bot.write(USER_CHAT, &format!("/start {ann_start}"));
    eventually("ann welcomed", Duration::from_secs(20), || async { !bot.sent_to(USER_CHAT).is_empty() }).await;
    let welcome = bot.sent_to(USER_CHAT)[0].clone();
    assert!(welcome.starts_with("این گفت‌وگو") && welcome.contains("ann (active)"), "{welcome}");
    // The same link again, from another chat: it binds nobody (one-time).
    bot.write(SECOND_CHAT, &format!("/start {ann_start}"));
    eventually("the used link refused", Duration::from_secs(20), || async { !bot.sent_to(SECOND_CHAT).is_empty() })
        .await;
    assert!(bot.sent_to(SECOND_CHAT)[0].starts_with("این لینک قبلاً استفاده شده"), "{:?}", bot.sent_to(SECOND_CHAT));
    // Her page now carries a new link.
    eventually("ann's page gets a new link", Duration::from_secs(20), || async {
        page_link(&browser, &ann_link, "fa").await.is_some_and(|start| start != ann_start)
    })
    .await;

    // Ben binds the second chat from his page, in English.
    let ben_start = page_link(&browser, &ben_link, "en").await.unwrap();
    bot.write(SECOND_CHAT, &format!("/start {ben_start}"));
    eventually("ben welcomed", Duration::from_secs(20), || async { bot.sent_to(SECOND_CHAT).len() >= 2 }).await;
    assert!(bot.sent_to(SECOND_CHAT)[1].starts_with("This chat is now linked"), "{:?}", bot.sent_to(SECOND_CHAT));

    // Each chat sees its own; a stranger's chat gets nothing at all.
    for text in ["/usage", "/link", "/help", "/start"] {
        bot.write(STRANGER, text);
    }
    bot.write(USER_CHAT, "/link");
    bot.write(SECOND_CHAT, "/usage");
    eventually("the chats answered", Duration::from_secs(20), || async {
        bot.sent_to(USER_CHAT).len() >= 2 && bot.sent_to(SECOND_CHAT).len() >= 3
    })
    .await;
    let ann_card = bot.sent_to(USER_CHAT)[1].clone();
    assert!(ann_card.contains(&ann_link) && ann_card.contains('▀') && ann_card.contains("ann (active)"), "{ann_card}");
    assert!(!ann_card.contains(&ben_link) && !ann_card.contains("ben"), "ann's chat shows ben: {ann_card}");
    let ben_card = bot.sent_to(SECOND_CHAT)[2].clone();
    assert!(
        ben_card.contains("ben (active)") && !ben_card.contains("ann") && !ben_card.contains(&ann_link),
        "{ben_card}"
    );

    // Reminders, once each, in each person's language, through a 429 and a 502.
    bot.fail_next(&[429, 502]);
    let soon = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 2 * 86_400;
    api.ok(control, Method::PATCH, &format!("/users/{ann}"), Some(json!({ "expires_at": soon }))).await;
    api.ok(control, Method::PATCH, &format!("/users/{ben}"), Some(json!({ "enabled": false }))).await;
    eventually("both told", Duration::from_secs(90), || async {
        bot.sent_to(USER_CHAT).len() >= 3 && bot.sent_to(SECOND_CHAT).len() >= 4
    })
    .await;
    assert_eq!(bot.failures_left(), 0, "Telegram's failures were met");
    assert!(bot.sent_to(USER_CHAT)[2].starts_with("دسترسی VPN شما در تاریخ 20"), "{:?}", bot.sent_to(USER_CHAT));
    assert!(
        bot.sent_to(SECOND_CHAT)[3].starts_with("Your VPN access has been turned off"),
        "{:?}",
        bot.sent_to(SECOND_CHAT)
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!((bot.sent_to(USER_CHAT).len(), bot.sent_to(SECOND_CHAT).len()), (3, 4), "told once each");

    // Ann unbinds: her chat gets nothing more.
    bot.write(USER_CHAT, "/stop");
    eventually("ann unbound", Duration::from_secs(20), || async { bot.sent_to(USER_CHAT).len() >= 4 }).await;
    bot.write(USER_CHAT, "/usage");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(bot.sent_to(USER_CHAT).len(), 4, "an unbound chat is answered: {:?}", bot.sent_to(USER_CHAT));
    assert!(bot.sent_to(STRANGER).is_empty(), "a stranger was answered: {:?}", bot.sent_to(STRANGER));

    // The owner turns the bot off for users: the pages lose the link.
    let off = json!({ "token": TOKEN, "chat_id": OWNER, "lang": "en", "tell_users": false, "events": ["node.*"] });
    api.ok(control, Method::PUT, "/telegram", Some(off)).await;
    eventually("the link gone", Duration::from_secs(20), || async {
        page_link(&browser, &ben_link, "en").await.is_none()
    })
    .await;
    let audit = api.get(control, "/audit?action=user.telegram_bound").await;
    assert_eq!(audit["entries"].as_array().map(Vec::len), Some(2), "{audit}");
}
