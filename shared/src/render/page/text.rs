//! What the subscription page says, in each language it speaks: one [`Text`] a language, and
//! numbers, sizes and dates written the way that language writes them. A language is one
//! more `Text` block, one more [`Lang`] and its date style.

/// A language the page speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lang {
    /// English.
    #[default]
    En,
    /// Russian.
    Ru,
    /// Persian, written right to left, with the Solar Hijri calendar and Persian digits.
    Fa,
    /// Simplified Chinese.
    Zh,
}

impl Lang {
    /// Every language, in the order the page's switch lists them.
    pub const ALL: [Lang; 4] = [Lang::En, Lang::Ru, Lang::Fa, Lang::Zh];

    /// What the page says in this language.
    pub fn text(self) -> &'static Text {
        match self {
            Lang::En => &EN,
            Lang::Ru => &RU,
            Lang::Fa => &FA,
            Lang::Zh => &ZH,
        }
    }

    /// The language a tag names ("ru", "fa-IR", "zh-Hans-CN", case-insensitive), if the page
    /// speaks it. Every Chinese tag gets Simplified Chinese.
    pub fn from_tag(tag: &str) -> Option<Lang> {
        let primary = tag.split(['-', '_']).next().unwrap_or("").trim();
        Lang::ALL.into_iter().find(|lang| primary.eq_ignore_ascii_case(lang.text().code))
    }

    /// The language an `Accept-Language` header prefers most among those the page speaks
    /// (the highest `q`, the first of equals; `q=0` is a refusal), English when none. Reads
    /// at most the header's first 32 entries.
    pub fn from_accept_language(header: &str) -> Lang {
        let mut best: Option<(Lang, f32)> = None;
        for item in header.split(',').take(32) {
            let mut parts = item.split(';');
            let Some(lang) = Lang::from_tag(parts.next().unwrap_or("")) else { continue };
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q=").map(|q| q.trim().parse::<f32>().unwrap_or(0.0)))
                .unwrap_or(1.0);
            if q > 0.0 && best.is_none_or(|(_, b)| q > b) {
                best = Some((lang, q));
            }
        }
        best.map_or(Lang::En, |(lang, _)| lang)
    }

    /// `text` with its ASCII digits in this language's digits.
    fn digits(self, text: &str) -> String {
        match self {
            Lang::Fa => text
                .chars()
                .map(|c| match c.to_digit(10) {
                    Some(d) => char::from_u32(0x06F0 + d).unwrap_or(c),
                    None => c,
                })
                .collect(),
            _ => text.to_owned(),
        }
    }

    /// A whole number as this language writes it.
    pub fn number(self, n: u64) -> String {
        self.digits(&n.to_string())
    }

    /// `bytes` in binary units, one decimal ("1.5 GiB", "1,5 ГиБ", "۱٫۵ GiB").
    pub fn size(self, bytes: u64) -> String {
        let text = self.text();
        let mut value = bytes as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < text.units.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            return format!("{} {}", self.number(bytes), text.units[0]);
        }
        let number = format!("{value:.1}").replace('.', text.decimal);
        format!("{} {}", self.digits(&number), text.units[unit])
    }

    /// A Unix time as a calendar date in UTC, as this language writes one: "1 January 2027",
    /// "1 января 2027 г.", "۱۱ دی ۱۴۰۵" (Solar Hijri), "2027年1月1日".
    pub fn date(self, unix: u64) -> String {
        let days = (unix / 86_400) as i64;
        match self {
            Lang::En => {
                let (y, m, d) = civil(days);
                format!("{d} {} {y}", EN.months[m as usize - 1])
            }
            Lang::Ru => {
                let (y, m, d) = civil(days);
                format!("{d} {} {y} г.", RU.months[m as usize - 1])
            }
            Lang::Fa => {
                let (y, m, d) = solar_hijri(days);
                self.digits(&format!("{d} {} {y}", FA.months[m as usize - 1]))
            }
            Lang::Zh => {
                let (y, m, d) = civil(days);
                format!("{y}年{m}月{d}日")
            }
        }
    }
}

/// Days since 1970-01-01 as a Gregorian (year, month, day) (Howard Hinnant's days-to-civil).
pub(super) fn civil(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// 1 Farvardin 1404, the Solar Hijri year's first day, as days since 1970-01-01
/// (21 March 2025).
const FARVARDIN_1404: i64 = 20_168;

/// Whether Solar Hijri `year` has 366 days, by the 33-year arithmetic cycle (it agrees with
/// the astronomical calendar Iran uses for the years from 1178 to 1633, 1799 to 2256 AD).
fn leap(year: i64) -> bool {
    matches!(year.rem_euclid(33), 1 | 5 | 9 | 13 | 17 | 22 | 26 | 30)
}

/// The days of any 33 years in a row: eight of them leap years.
const CYCLE_DAYS: i64 = 33 * 365 + 8;

/// Days since 1970-01-01 as a Solar Hijri (year, month, day): six months of 31 days, five of
/// 30, and Esfand of 29 or 30. Whole cycles of 33 years first, so any date (an expiry is any
/// number control signed) takes at most 33 steps.
fn solar_hijri(days: i64) -> (i64, i64, i64) {
    let length = |year| if leap(year) { 366 } else { 365 };
    let offset = days - FARVARDIN_1404;
    let (mut year, mut offset) = (1404 + 33 * offset.div_euclid(CYCLE_DAYS), offset.rem_euclid(CYCLE_DAYS));
    while offset >= length(year) {
        offset -= length(year);
        year += 1;
    }
    if offset < 186 {
        (year, offset / 31 + 1, offset % 31 + 1)
    } else {
        (year, (offset - 186) / 30 + 7, (offset - 186) % 30 + 1)
    }
}

/// Everything the page says in one language. `{app}`, `{platform}`, `{used}` and `{total}`
/// are filled in where they stand.
#[derive(Debug)]
pub struct Text {
    /// The language's tag, for `lang=` and the `?lang=` switch.
    pub code: &'static str,
    /// The language's own name, for the switch.
    pub name: &'static str,
    /// Whether the language is written right to left.
    pub rtl: bool,
    /// The label of the language switch.
    pub language: &'static str,
    /// The label of the device switch.
    pub device: &'static str,
    /// A user who can connect.
    pub active: &'static str,
    /// A user whose time starts at the first connection.
    pub not_started: &'static str,
    /// A disabled user.
    pub disabled: &'static str,
    /// An expired user.
    pub expired: &'static str,
    /// A user over the quota.
    pub over_quota: &'static str,
    /// What a disabled user can do.
    pub todo_disabled: &'static str,
    /// What an expired user can do.
    pub todo_expired: &'static str,
    /// What a user over the quota can do.
    pub todo_over_quota: &'static str,
    /// The state of a subscription that works but reaches no server yet.
    pub preparing: &'static str,
    /// What to do about it.
    pub todo_preparing: &'static str,
    /// That nothing needs doing in the apps once the subscription works again.
    pub same_link: &'static str,
    /// The label of the traffic used.
    pub used: &'static str,
    /// Traffic used of the quota: `{used}` of `{total}`.
    pub used_of: &'static str,
    /// Traffic used where there is no quota: `{used}`.
    pub used_no_limit: &'static str,
    /// The label of the expiry date.
    pub expires: &'static str,
    /// No expiry date.
    pub never: &'static str,
    /// The heading of the set-up steps, for `{platform}`.
    pub setup: &'static str,
    /// Step one: install `{app}`.
    pub install: &'static str,
    /// The link to the very file of an app: `{file}`.
    pub download: &'static str,
    /// The link to an app's newest release on GitHub, and which `{file}` to take from it.
    pub newest: &'static str,
    /// Step two.
    pub add: &'static str,
    /// The import button, into `{app}`.
    pub add_to: &'static str,
    /// Step three in Hiddify, on a phone.
    pub tap_hiddify: &'static str,
    /// Step three in Hiddify, on a computer.
    pub click_hiddify: &'static str,
    /// Step three in another `{app}`.
    pub tap_other: &'static str,
    /// The list of the other apps for the platform.
    pub other_apps: &'static str,
    /// The caption of the subscription link's QR code (on a computer).
    pub scan: &'static str,
    /// The heading of the link itself.
    pub link: &'static str,
    /// What to do with the link if a button does nothing.
    pub link_hint: &'static str,
    /// The copy button.
    pub copy: &'static str,
    /// The copy button once it copied.
    pub copied: &'static str,
    /// A link that moved.
    pub moved: &'static str,
    /// The heading of the mirrors.
    pub mirrors: &'static str,
    /// The text of the mirrors.
    pub mirrors_text: &'static str,
    /// The label of a mirror's field.
    pub mirror_label: &'static str,
    /// The heading of the servers.
    pub servers: &'static str,
    /// The label of a server's field.
    pub server_label: &'static str,
    /// The support link.
    pub help: &'static str,
    /// The heading of the link to the owner's Telegram bot.
    pub telegram: &'static str,
    /// What the bot does for the person.
    pub telegram_text: &'static str,
    /// The link's label.
    pub telegram_button: &'static str,
    /// The names of the months (in the form that follows a day, where the language has one).
    pub months: [&'static str; 12],
    /// The decimal separator.
    pub decimal: &'static str,
    /// Bytes, KiB, MiB, GiB, TiB, PiB.
    pub units: [&'static str; 6],
}

/// English.
pub const EN: Text = Text {
    code: "en",
    name: "English",
    rtl: false,
    language: "Language",
    device: "Your device",
    active: "Active",
    not_started: "Ready: your time starts when you first connect",
    disabled: "This subscription is turned off",
    expired: "This subscription has ended",
    over_quota: "This subscription's traffic is used up",
    todo_disabled: "Ask the person who gave you this link to turn it back on.",
    todo_expired: "Ask the person who gave you this link to renew it.",
    todo_over_quota: "Ask the person who gave you this link for more traffic.",
    preparing: "Being set up",
    todo_preparing: "The service is being set up: come back a little later. This link is yours and will work as it is.",
    same_link: "Keep this link: once the subscription works again, your apps connect with it as before.",
    used: "Used",
    used_of: "{used} of {total}",
    used_no_limit: "{used} used, no limit",
    expires: "Valid until",
    never: "no end date",
    setup: "Set up on {platform}",
    install: "Install {app}",
    download: "Download {file}",
    newest: "GitHub: the newest file ending in {file}",
    add: "Add your subscription",
    add_to: "Add to {app}",
    tap_hiddify: "Open Hiddify and tap the large button in the middle to connect.",
    click_hiddify: "Open Hiddify and click the large button in the middle to connect.",
    tap_other: "Open {app}, choose this subscription and connect.",
    other_apps: "Other apps",
    scan: "Or scan this code with the app on your phone",
    link: "Your subscription link",
    link_hint: "If a button does nothing, copy this link and add it in your app (\u{201c}Add from clipboard\u{201d}).",
    copy: "Copy",
    copied: "Copied",
    moved: "This link moved. Use the new one below: add it to your app again.",
    mirrors: "If this link stops working",
    mirrors_text: "The same subscription, at other addresses:",
    mirror_label: "Mirror link",
    servers: "Servers",
    server_label: "Server link",
    help: "Get help",
    telegram: "Reminders in Telegram",
    telegram_text: "Get your usage, your expiry date and your link from our Telegram bot, and a reminder before your traffic or your access runs out. The button works once: it links this subscription to your chat.",
    telegram_button: "Open the bot",
    months: [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ],
    decimal: ".",
    units: ["B", "KiB", "MiB", "GiB", "TiB", "PiB"],
};

/// Russian.
pub const RU: Text = Text {
    code: "ru",
    name: "Русский",
    rtl: false,
    language: "Язык",
    device: "Ваше устройство",
    active: "Активна",
    not_started: "Готова: срок пойдёт с первого подключения",
    disabled: "Подписка отключена",
    expired: "Срок подписки закончился",
    over_quota: "Трафик подписки израсходован",
    todo_disabled: "Попросите того, кто дал вам эту ссылку, снова её включить.",
    todo_expired: "Попросите того, кто дал вам эту ссылку, продлить подписку.",
    todo_over_quota: "Попросите того, кто дал вам эту ссылку, добавить трафик.",
    preparing: "Настраивается",
    todo_preparing: "Сервис ещё настраивается: загляните чуть позже. Эта ссылка ваша и заработает без изменений.",
    same_link: "Сохраните эту ссылку: когда подписка снова заработает, приложения подключатся по ней, как раньше.",
    used: "Использовано",
    used_of: "{used} из {total}",
    used_no_limit: "Использовано {used}, без лимита",
    expires: "Действует до",
    never: "бессрочно",
    setup: "Настройка: {platform}",
    install: "Установите {app}",
    download: "Скачать {file}",
    newest: "GitHub: новейший файл, имя которого оканчивается на {file}",
    add: "Добавьте подписку",
    add_to: "Добавить в {app}",
    tap_hiddify: "Откройте Hiddify и нажмите большую кнопку в центре, чтобы подключиться.",
    click_hiddify: "Откройте Hiddify и щёлкните большую кнопку в центре, чтобы подключиться.",
    tap_other: "Откройте {app}, выберите эту подписку и подключитесь.",
    other_apps: "Другие приложения",
    scan: "Или отсканируйте этот код приложением на телефоне",
    link: "Ваша ссылка на подписку",
    link_hint: "Если кнопка не срабатывает, скопируйте ссылку и добавьте её в приложении («Добавить из буфера обмена»).",
    copy: "Копировать",
    copied: "Скопировано",
    moved: "Эта ссылка переехала. Используйте новую ниже: добавьте её в приложение заново.",
    mirrors: "Если эта ссылка перестанет работать",
    mirrors_text: "Та же подписка по другим адресам:",
    mirror_label: "Запасная ссылка",
    servers: "Серверы",
    server_label: "Ссылка на сервер",
    help: "Помощь",
    telegram: "Напоминания в Telegram",
    telegram_text: "Узнавайте остаток трафика, срок доступа и свою ссылку у нашего бота в Telegram и получайте напоминание, пока трафик или доступ не закончились. Кнопка срабатывает один раз: она привязывает эту подписку к вашему чату.",
    telegram_button: "Открыть бота",
    months: [
        "января",
        "февраля",
        "марта",
        "апреля",
        "мая",
        "июня",
        "июля",
        "августа",
        "сентября",
        "октября",
        "ноября",
        "декабря",
    ],
    decimal: ",",
    units: ["Б", "КиБ", "МиБ", "ГиБ", "ТиБ", "ПиБ"],
};

/// Persian.
pub const FA: Text = Text {
    code: "fa",
    name: "فارسی",
    rtl: true,
    language: "زبان",
    device: "دستگاه شما",
    active: "فعال",
    not_started: "آماده: اعتبار از اولین اتصال شروع می‌شود",
    disabled: "این اشتراک غیرفعال شده است",
    expired: "مدت این اشتراک تمام شده است",
    over_quota: "حجم این اشتراک تمام شده است",
    todo_disabled: "از کسی که این لینک را به شما داده بخواهید آن را دوباره فعال کند.",
    todo_expired: "از کسی که این لینک را به شما داده بخواهید اشتراک را تمدید کند.",
    todo_over_quota: "از کسی که این لینک را به شما داده بخواهید حجم بیشتری اضافه کند.",
    preparing: "در حال راه‌اندازی",
    todo_preparing: "سرویس در حال راه‌اندازی است: کمی بعد سر بزنید. این لینک مال شماست و بدون تغییر کار خواهد کرد.",
    same_link: "این لینک را نگه دارید: وقتی اشتراک دوباره فعال شود، برنامه‌ها مثل قبل با آن وصل می‌شوند.",
    used: "مصرف‌شده",
    used_of: "{used} از {total}",
    used_no_limit: "{used} مصرف شده، بدون محدودیت",
    expires: "اعتبار تا",
    never: "بدون تاریخ پایان",
    setup: "راه‌اندازی روی {platform}",
    install: "{app} را نصب کنید",
    download: "دانلود {file}",
    newest: "GitHub: جدیدترین فایلی که نامش به {file} ختم می‌شود",
    add: "اشتراک را اضافه کنید",
    add_to: "افزودن به {app}",
    tap_hiddify: "Hiddify را باز کنید و برای اتصال، دکمهٔ بزرگ وسط صفحه را بزنید.",
    click_hiddify: "Hiddify را باز کنید و برای اتصال، روی دکمهٔ بزرگ وسط صفحه کلیک کنید.",
    tap_other: "{app} را باز کنید، این اشتراک را انتخاب کنید و وصل شوید.",
    other_apps: "برنامه‌های دیگر",
    scan: "یا این کد را با برنامهٔ گوشی‌تان اسکن کنید",
    link: "لینک اشتراک شما",
    link_hint: "اگر دکمه کاری نکرد، لینک را کپی کنید و در برنامه اضافه کنید («افزودن از کلیپ‌بورد»).",
    copy: "کپی",
    copied: "کپی شد",
    moved: "این لینک تغییر کرده است. از لینک جدید زیر استفاده کنید و آن را دوباره به برنامه اضافه کنید.",
    mirrors: "اگر این لینک کار نکرد",
    mirrors_text: "همین اشتراک در نشانی‌های دیگر:",
    mirror_label: "لینک جایگزین",
    servers: "سرورها",
    server_label: "لینک سرور",
    help: "راهنمایی",
    telegram: "یادآوری در تلگرام",
    telegram_text: "مصرف، تاریخ پایان و لینک خود را از ربات تلگرام ما بگیرید و پیش از تمام شدن ترافیک یا دسترسی، یادآوری دریافت کنید. این دکمه یک بار کار می‌کند: این اشتراک را به گفت‌وگوی شما پیوند می‌دهد.",
    telegram_button: "باز کردن ربات",
    months: ["فروردین", "اردیبهشت", "خرداد", "تیر", "مرداد", "شهریور", "مهر", "آبان", "آذر", "دی", "بهمن", "اسفند"],
    decimal: "٫",
    units: ["B", "KiB", "MiB", "GiB", "TiB", "PiB"],
};

/// Simplified Chinese.
pub const ZH: Text = Text {
    code: "zh",
    name: "简体中文",
    rtl: false,
    language: "语言",
    device: "您的设备",
    active: "可用",
    not_started: "已就绪：首次连接时开始计算有效期",
    disabled: "此订阅已停用",
    expired: "此订阅已到期",
    over_quota: "此订阅的流量已用完",
    todo_disabled: "请联系给您此链接的人重新启用。",
    todo_expired: "请联系给您此链接的人续期。",
    todo_over_quota: "请联系给您此链接的人增加流量。",
    preparing: "正在设置",
    todo_preparing: "服务正在设置中：请稍后再来。此链接属于您，届时无需更改即可使用。",
    same_link: "请保留此链接：订阅恢复后，应用会像以前一样用它连接。",
    used: "已用流量",
    used_of: "{used} / {total}",
    used_no_limit: "已用 {used}，不限流量",
    expires: "有效期至",
    never: "长期有效",
    setup: "在 {platform} 上设置",
    install: "安装 {app}",
    download: "下载 {file}",
    newest: "GitHub：最新版本中名称以 {file} 结尾的文件",
    add: "添加订阅",
    add_to: "添加到 {app}",
    tap_hiddify: "打开 Hiddify，轻点中间的大按钮即可连接。",
    click_hiddify: "打开 Hiddify，点击中间的大按钮即可连接。",
    tap_other: "打开 {app}，选择此订阅并连接。",
    other_apps: "其他应用",
    scan: "或用手机上的应用扫描此二维码",
    link: "您的订阅链接",
    link_hint: "如果按钮没有反应，请复制此链接，在应用中添加（“从剪贴板导入”）。",
    copy: "复制",
    copied: "已复制",
    moved: "此链接已更换。请使用下方的新链接，并重新添加到应用中。",
    mirrors: "如果此链接无法使用",
    mirrors_text: "同一订阅的其他地址：",
    mirror_label: "备用链接",
    servers: "服务器",
    server_label: "服务器链接",
    help: "获取帮助",
    telegram: "Telegram 提醒",
    telegram_text: "通过我们的 Telegram 机器人查看用量、到期日期和订阅链接，并在流量或使用期限用完之前收到提醒。此按钮只能使用一次：它会将此订阅与您的聊天绑定。",
    telegram_button: "打开机器人",
    months: ["1月", "2月", "3月", "4月", "5月", "6月", "7月", "8月", "9月", "10月", "11月", "12月"],
    decimal: ".",
    units: ["B", "KiB", "MiB", "GiB", "TiB", "PiB"],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preferred_language_is_the_highest_q_the_page_speaks() {
        assert_eq!(Lang::from_accept_language(""), Lang::En);
        assert_eq!(Lang::from_accept_language("ru-RU,ru;q=0.9,en-US;q=0.8,en;q=0.7"), Lang::Ru);
        assert_eq!(Lang::from_accept_language("fa-IR"), Lang::Fa);
        assert_eq!(Lang::from_accept_language("zh-TW,zh;q=0.9"), Lang::Zh);
        assert_eq!(Lang::from_accept_language("de-DE,de;q=0.9,fa;q=0.5,ru;q=0.6"), Lang::Ru);
        assert_eq!(Lang::from_accept_language("en;q=0.1, zh-Hans-CN"), Lang::Zh);
        assert_eq!(Lang::from_accept_language("ru;q=0, de"), Lang::En, "q=0 refuses a language");
        assert_eq!(Lang::from_accept_language("ru;q=garbage, fa;q=0.3"), Lang::Fa);
        assert_eq!(Lang::from_accept_language("*"), Lang::En);
        let long = format!("{}fa", "de,".repeat(40));
        assert_eq!(Lang::from_accept_language(&long), Lang::En, "only the first 32 entries are read");
        assert_eq!(Lang::from_tag("ZH_cn"), Some(Lang::Zh));
        assert_eq!(Lang::from_tag("e"), None);
    }

    #[test]
    fn sizes_in_each_language() {
        assert_eq!(Lang::En.size(1023), "1023 B");
        assert_eq!(Lang::En.size(52_428_800), "50.0 MiB");
        assert_eq!(Lang::Ru.size(1_610_612_736), "1,5 ГиБ");
        assert_eq!(Lang::Fa.size(1_610_612_736), "۱٫۵ GiB");
        assert_eq!(Lang::Fa.size(12), "۱۲ B");
        assert_eq!(Lang::Zh.size(107_374_182_400), "100.0 GiB");
    }

    #[test]
    fn dates_in_each_language_and_calendar() {
        let new_year_2027 = 1_798_761_600;
        assert_eq!(Lang::En.date(new_year_2027), "1 January 2027");
        assert_eq!(Lang::Ru.date(new_year_2027), "1 января 2027 г.");
        assert_eq!(Lang::Zh.date(new_year_2027), "2027年1月1日");
        assert_eq!(Lang::Fa.date(new_year_2027), "۱۱ دی ۱۴۰۵");
        assert_eq!(Lang::En.date(951_782_400), "29 February 2000");
        assert_eq!(Lang::En.date(0), "1 January 1970");
    }

    /// Nowruz (1 Farvardin) on the days Iran's calendar has it, around leap years of both
    /// calendars, and the last day of a leap Esfand.
    #[test]
    fn solar_hijri_new_years() {
        let day = |y, m, d| {
            // Days since 1970 of a Gregorian date, by counting back from civil().
            (0..40_000).find(|&n| civil(n) == (y, m, d)).unwrap()
        };
        assert_eq!(solar_hijri(day(2025, 3, 21)), (1404, 1, 1));
        assert_eq!(solar_hijri(day(2024, 3, 20)), (1403, 1, 1));
        assert_eq!(solar_hijri(day(2025, 3, 20)), (1403, 12, 30), "1403 is a leap year");
        assert_eq!(solar_hijri(day(2023, 3, 21)), (1402, 1, 1));
        assert_eq!(solar_hijri(day(2026, 3, 21)), (1405, 1, 1));
        assert_eq!(solar_hijri(day(2028, 3, 20)), (1407, 1, 1));
        assert_eq!(solar_hijri(day(2000, 3, 20)), (1379, 1, 1));
        assert_eq!(solar_hijri(day(1979, 2, 11)), (1357, 11, 22));
        assert_eq!(solar_hijri(day(2025, 9, 22)), (1404, 6, 31));
        assert_eq!(solar_hijri(day(2025, 9, 23)), (1404, 7, 1));
        assert_eq!(Lang::Fa.date(0), "۱۱ دی ۱۳۴۸");
        assert_eq!(solar_hijri(FARVARDIN_1404 + 3 * CYCLE_DAYS), (1503, 1, 1), "33 years are a cycle");
        assert_eq!(solar_hijri(FARVARDIN_1404 - CYCLE_DAYS - 1), (1370, 12, 30), "1370 is a leap year");
    }

    /// The largest expiry a snapshot can carry is written at once, in every language (the
    /// fuzzer found a date walked year by year: minutes for a far one).
    #[test]
    fn the_farthest_date_is_written_at_once() {
        let started = std::time::Instant::now();
        for lang in Lang::ALL {
            assert!(!lang.date(u64::MAX).is_empty());
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "{:?}", started.elapsed());
    }
}
