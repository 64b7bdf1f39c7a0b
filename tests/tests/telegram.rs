//! The owner's Telegram bot, end to end: the real control binary against a local stand-in of
//! the Bot API (`hearth_tests::telegram`, which checks every request against the Bot API's
//! documented methods and fields). The bot is checked when saved, a burst of events is one
//! message, commands work from the owner's chat only, nothing is lost across a restart, and
//! users are told of their own expiry.

use std::time::Duration;

use hearth_tests::control::{ControlDir, ControlProcess};
use hearth_tests::eventually;
use hearth_tests::telegram::{BotApi, OWNER, STRANGER, TOKEN, USER_CHAT};
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
