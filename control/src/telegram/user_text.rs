//! What the bot says to the people who use the links, in the languages of their
//! subscription page: English, Russian, Persian and Chinese.

pub(super) use hearth_shared::render::page::Lang;
use hearth_shared::render::page::escape;

/// The page language of a code (`en`, `ru`, `fa`, `zh`), exactly.
pub(super) fn lang_of(code: &str) -> Option<Lang> {
    Lang::ALL.into_iter().find(|lang| lang.text().code == code)
}

/// What the bot tells a user.
#[derive(Clone, Copy, Debug)]
pub(super) enum Told<'a> {
    /// The chat was bound.
    Welcome,
    /// A link that was used already, or that no page gave.
    BindFailed,
    Help,
    /// The chat was unbound.
    Stopped,
    Near {
        percent: u64,
    },
    Expires {
        date: &'a str,
        last_day: bool,
    },
    Disabled,
}

/// The message (Telegram HTML).
pub(super) fn told(lang: Lang, what: Told<'_>) -> String {
    let help = match lang {
        Lang::En => {
            "/usage — your traffic and expiry\n/link — your subscription link and its QR code\n/stop — unlink this chat"
        }
        Lang::Ru => "/usage — трафик и срок доступа\n/link — ссылка на подписку и её QR-код\n/stop — отвязать этот чат",
        Lang::Fa => "/usage — ترافیک و تاریخ پایان\n/link — لینک اشتراک و کد QR آن\n/stop — جدا کردن این گفت‌وگو",
        Lang::Zh => "/usage — 流量和到期时间\n/link — 订阅链接及其二维码\n/stop — 解除与此聊天的绑定",
    };
    match what {
        Told::Welcome => {
            let hello = match lang {
                Lang::En => {
                    "This chat is now linked to your VPN subscription: you will be reminded here before your traffic or your access runs out."
                }
                Lang::Ru => {
                    "Этот чат привязан к вашей подписке VPN: здесь вы получите напоминание, пока трафик или доступ не закончились."
                }
                Lang::Fa => {
                    "این گفت‌وگو به اشتراک VPN شما پیوند خورد: پیش از تمام شدن ترافیک یا دسترسی، همین‌جا یادآوری می‌گیرید."
                }
                Lang::Zh => "此聊天已绑定到您的 VPN 订阅：在流量或使用期限用完之前，您会在这里收到提醒。",
            };
            format!("{hello}\n{help}")
        }
        Told::BindFailed => match lang {
            Lang::En => {
                "This link was used already, or it is not valid. Open your subscription page again and press the Telegram button there."
            }
            Lang::Ru => {
                "Эта ссылка уже использована или недействительна. Откройте страницу подписки ещё раз и нажмите там кнопку Telegram."
            }
            Lang::Fa => {
                "این لینک قبلاً استفاده شده یا معتبر نیست. صفحهٔ اشتراک خود را دوباره باز کنید و دکمهٔ تلگرام را در آن بزنید."
            }
            Lang::Zh => "此链接已被使用或无效。请重新打开您的订阅页面，并点击其中的 Telegram 按钮。",
        }
        .to_owned(),
        Told::Help => help.to_owned(),
        Told::Stopped => match lang {
            Lang::En => {
                "This chat is unlinked and gets nothing more. To link it again, press the Telegram button on your subscription page."
            }
            Lang::Ru => {
                "Чат отвязан, сюда больше ничего не придёт. Чтобы привязать его снова, нажмите кнопку Telegram на странице подписки."
            }
            Lang::Fa => {
                "این گفت‌وگو جدا شد و دیگر پیامی دریافت نمی‌کند. برای پیوند دوباره، دکمهٔ تلگرام را در صفحهٔ اشتراک خود بزنید."
            }
            Lang::Zh => "已解除此聊天的绑定，之后不会再收到任何消息。如需重新绑定，请点击订阅页面上的 Telegram 按钮。",
        }
        .to_owned(),
        Told::Near { percent } => match lang {
            Lang::En => format!("You have used {percent}% of your VPN traffic."),
            Lang::Ru => format!("Вы использовали {percent}% трафика VPN."),
            Lang::Fa => format!("شما {percent}٪ از ترافیک VPN خود را مصرف کرده‌اید."),
            Lang::Zh => format!("您已使用 {percent}% 的 VPN 流量。"),
        },
        Told::Expires { date, last_day: false } => {
            let date = escape(date);
            match lang {
                Lang::En => format!("Your VPN access ends on {date}."),
                Lang::Ru => format!("Ваш доступ к VPN заканчивается {date}."),
                Lang::Fa => format!("دسترسی VPN شما در تاریخ {date} به پایان می‌رسد."),
                Lang::Zh => format!("您的 VPN 使用期限将于 {date} 结束。"),
            }
        }
        Told::Expires { date, last_day: true } => {
            let date = escape(date);
            match lang {
                Lang::En => format!("Your VPN access ends within a day, on {date}."),
                Lang::Ru => format!("Ваш доступ к VPN закончится меньше чем через сутки, {date}."),
                Lang::Fa => format!("دسترسی VPN شما کمتر از یک روز دیگر، در تاریخ {date}، به پایان می‌رسد."),
                Lang::Zh => format!("您的 VPN 使用期限将在一天内（{date}）结束。"),
            }
        }
        Told::Disabled => match lang {
            Lang::En => "Your VPN access has been turned off. Ask whoever runs your VPN if you do not know why.",
            Lang::Ru => "Ваш доступ к VPN отключён. Если вы не знаете почему, спросите того, кто ведёт ваш VPN.",
            Lang::Fa => "دسترسی VPN شما غیرفعال شد. اگر دلیلش را نمی‌دانید، از کسی که VPN شما را اداره می‌کند بپرسید.",
            Lang::Zh => "您的 VPN 使用权限已被关闭。如不清楚原因，请咨询您的 VPN 管理者。",
        }
        .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message in every language: said, distinct from the English, without a
    /// placeholder left, with what is put in escaped.
    #[test]
    fn every_message_speaks_each_language() {
        let all = |date| {
            [
                Told::Welcome,
                Told::BindFailed,
                Told::Help,
                Told::Stopped,
                Told::Near { percent: 95 },
                Told::Expires { date, last_day: false },
                Told::Expires { date, last_day: true },
                Told::Disabled,
            ]
        };
        for what in all("2027-01-02<") {
            let english = told(Lang::En, what);
            for lang in Lang::ALL {
                let text = told(lang, what);
                assert!(!text.trim().is_empty() && !text.contains('{'), "{lang:?} {what:?}: {text}");
                assert!(!text.contains("2027-01-02<"), "{lang:?} {what:?} leaves a date unescaped");
                if lang != Lang::En {
                    assert_ne!(text, english, "{lang:?} {what:?} is English");
                }
            }
        }
        assert_eq!(told(Lang::Fa, Told::Near { percent: 80 }), "شما 80٪ از ترافیک VPN خود را مصرف کرده‌اید.");
        assert_eq!(told(Lang::Zh, Told::Near { percent: 80 }), "您已使用 80% 的 VPN 流量。");
        assert_eq!(lang_of("fa"), Some(Lang::Fa));
        assert_eq!(lang_of("de"), None);
    }
}
