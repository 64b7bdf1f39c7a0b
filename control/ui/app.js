// Hearth's admin panel: a small single-page app on top of the admin API (the same JSON API
// scripts use; nothing private). Plain JavaScript, no framework, no build step: control
// embeds this file and serves it under a hashed name. Every string a person reads comes from
// strings.js, so a language is one more block there.
'use strict';

(() => {
  const STRINGS = window.HEARTH_STRINGS;
  const LANGS = Object.keys(STRINGS);
  const preferred = (navigator.languages || [navigator.language || 'en']).map((l) => l.slice(0, 2).toLowerCase());
  let lang = localStorage.getItem('hearth.lang');
  if (!LANGS.includes(lang)) lang = preferred.find((l) => LANGS.includes(l)) || 'en';

  /** The string `key` in the chosen language, with `{name}` replaced from `vars`. */
  function t(key, vars) {
    let s = STRINGS[lang][key] ?? STRINGS.en[key] ?? key;
    for (const [k, v] of Object.entries(vars || {})) s = s.replaceAll(`{${k}}`, v);
    return s;
  }

  /** The string `key` for a count `n`, in the plural form the language uses for it
   * (`key.one`, `key.few`, `key.many`, `key.other`: Intl.PluralRules' categories), with `{n}`
   * written as the language writes numbers. */
  function tn(key, n, vars) {
    const form = (l) => {
      const table = STRINGS[l];
      return table[`${key}.${new Intl.PluralRules(l).select(n)}`] ?? table[`${key}.other`];
    };
    let s = form(lang) ?? form('en') ?? key;
    for (const [k, v] of Object.entries({ ...vars, n: number(n) })) s = s.replaceAll(`{${k}}`, v);
    return s;
  }

  // ---- DOM ------------------------------------------------------------------------------

  /** Makes an element: attributes (`on*` become listeners) and children (text is escaped). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else if (k === 'value') el.value = v;
      else if (k === 'checked') el.checked = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat(Infinity)) {
      if (c != null && c !== false) el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  const app = () => document.getElementById('app');

  function mount(...children) {
    app().replaceChildren(...children);
  }

  /** A form's fields by name. */
  function fields(form) {
    const out = {};
    for (const el of form.elements) {
      if (!el.name) continue;
      out[el.name] = el.type === 'checkbox' ? el.checked : el.value.trim();
    }
    return out;
  }

  /** The form field an API error is about: `bad_<field>` names it; a few codes are about a
   * field of another name. */
  const ERROR_FIELDS = { conflict: 'name', bad_expiry: 'days', duplicate_names: 'names', names_taken: 'names', bad_bulk: 'names', same_password: 'password', bad_current: 'current', bad_device_limit: 'device_limit', no_user: 'user_name', bad_routing_rules: 'rules' };

  function fieldOf(form, code) {
    const name = ERROR_FIELDS[code] || (code && code.startsWith('bad_') ? code.slice(4) : null);
    const el = name && form.elements.namedItem(name);
    return el instanceof HTMLElement && el.type !== 'hidden' ? el : null;
  }

  /** Runs `work` for a form: disables it meanwhile and shows an error where it happened: next
   * to the field it is about (marked invalid, the message read out with it), or under the form. */
  async function submitting(form, work) {
    const box = form.querySelector('.error');
    box.textContent = '';
    box.hidden = true;
    for (const old of form.querySelectorAll('.field-error')) old.remove();
    for (const el of form.querySelectorAll('[aria-invalid]')) {
      el.removeAttribute('aria-invalid');
      el.removeAttribute('aria-describedby');
    }
    const buttons = form.querySelectorAll('button');
    buttons.forEach((b) => (b.disabled = true));
    try {
      await work();
    } catch (e) {
      const el = fieldOf(form, e.code);
      if (el) {
        // Unique on the page, where several forms have a field of this name (rule sets).
        let id = `error-${el.name}`;
        for (let n = 2; document.getElementById(id); n++) id = `error-${el.name}-${n}`;
        el.setAttribute('aria-invalid', 'true');
        el.setAttribute('aria-describedby', id);
        el.after(h('small', { class: 'field-error', id, role: 'alert' }, e.message));
        el.focus();
      } else {
        box.textContent = e.message;
        box.hidden = false;
      }
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  }

  /** Runs `work` when `form` is submitted (through [`submitting`]: disabled meanwhile, errors
   * shown in the form). */
  function onSubmit(form, work) {
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      submitting(form, work);
    });
  }

  function errorBox() {
    return h('p', { class: 'error', role: 'alert', hidden: true });
  }

  function field(label, input, hint) {
    return h('label', { class: 'field' }, h('span', {}, label), input, hint ? h('small', {}, hint) : null);
  }

  /** A modal dialog holding `content`; closed by Esc, the close button, or `close()`. */
  function dialog(title, content) {
    const d = h(
      'dialog',
      { class: 'dialog', 'aria-label': title },
      h('header', {}, h('h2', {}, title), h('button', { type: 'button', class: 'ghost', 'aria-label': t('close'), onclick: () => d.close() }, '×')),
      content,
    );
    d.addEventListener('close', () => d.remove());
    document.body.append(d);
    d.showModal();
    return d;
  }

  // A dialog belongs to the page it opened on: going to another page (the back button, a
  // link) closes it.
  window.addEventListener('hashchange', () => {
    for (const d of document.querySelectorAll('dialog[open]')) d.close();
  });

  function confirmAction(message, action) {
    return new Promise((resolve) => {
      const form = h(
        'form',
        { method: 'dialog' },
        h('p', {}, message),
        errorBox(),
        h(
          'div',
          { class: 'actions' },
          h('button', { type: 'button', class: 'ghost', onclick: () => d.close() }, t('cancel')),
          h('button', { type: 'submit', class: 'danger' }, action),
        ),
      );
      const d = dialog(t('confirm'), form);
      form.addEventListener('submit', (e) => {
        e.preventDefault();
        d.close();
        resolve(true);
      });
      d.addEventListener('close', () => resolve(false));
    });
  }

  function copyButton(text) {
    const button = h('button', { type: 'button', class: 'ghost small' }, t('copy'));
    button.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = t('copied');
      } catch {
        // No clipboard (plain HTTP, or refused): select the text for the person to copy.
        const box = button.parentElement.querySelector('code, input');
        if (box) window.getSelection().selectAllChildren(box);
        button.textContent = t('copy_by_hand');
      }
      setTimeout(() => (button.textContent = t('copy')), 2000);
    });
    return button;
  }

  function secretBox(text) {
    return h('div', { class: 'secret' }, h('code', {}, text), copyButton(text));
  }

  // ---- formatting -----------------------------------------------------------------------

  /** A figure kept whole in a right-to-left page: in Unicode isolates (U+2068 ... U+2069, what
   * `<bdi>` does), so "۰ B / ۱۰۰ GiB" never comes apart into "B / ۱۰۰ GiB ۰". Left-to-right
   * pages need none. */
  const whole = (text) => (document.documentElement.dir === 'rtl' ? `\u2068${text}\u2069` : text);

  const number = (n) => whole(new Intl.NumberFormat(lang).format(n));

  /** A size in binary units, in the language's numbers and unit names (`units`). */
  function bytes(n) {
    const units = t('units').split(' ');
    if (!n) return whole(`${new Intl.NumberFormat(lang).format(0)} ${units[0]}`);
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return whole(`${new Intl.NumberFormat(lang, { maximumFractionDigits: n < 10 && i ? 1 : 0 }).format(n)} ${units[i]}`);
  }

  function date(seconds) {
    if (!seconds) return t('never');
    return whole(new Intl.DateTimeFormat(lang, { dateStyle: 'medium' }).format(new Date(seconds * 1000)));
  }

  function dateTime(seconds) {
    if (!seconds) return t('never');
    return whole(new Intl.DateTimeFormat(lang, { dateStyle: 'short', timeStyle: 'short' }).format(new Date(seconds * 1000)));
  }

  function ago(seconds) {
    if (!seconds) return t('never');
    const diff = Math.round(seconds - Date.now() / 1000);
    const rtf = new Intl.RelativeTimeFormat(lang, { numeric: 'auto' });
    for (const [unit, size] of [['day', 86400], ['hour', 3600], ['minute', 60]]) {
      if (Math.abs(diff) >= size) return whole(rtf.format(Math.round(diff / size), unit));
    }
    return whole(rtf.format(diff, 'second'));
  }

  /** A bar chart of daily traffic (download over upload), as SVG: no library, no inline style. */
  function chart(days, label) {
    const ns = 'http://www.w3.org/2000/svg';
    const svg = (tag, attrs, ...children) => {
      const el = document.createElementNS(ns, tag);
      for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
      el.append(...children);
      return el;
    };
    const max = Math.max(1, ...days.map((d) => d.up + d.down));
    const width = 10;
    const bars = days.map((d, i) => {
      const down = (d.down / max) * 100;
      const up = (d.up / max) * 100;
      const title = `${date(d.day)}: ↓ ${bytes(d.down)} ↑ ${bytes(d.up)}`;
      return svg(
        'g',
        {},
        svg('title', {}, title),
        svg('rect', { class: 'down', x: i * width + 1, y: 100 - down - up, width: width - 2, height: down }),
        svg('rect', { class: 'up', x: i * width + 1, y: 100 - up, width: width - 2, height: up }),
      );
    });
    return svg(
      'svg',
      { class: 'chart', viewBox: `0 0 ${days.length * width} 100`, preserveAspectRatio: 'none', role: 'img', 'aria-label': label },
      svg('title', {}, label),
      ...bars,
    );
  }

  function trafficCard(days, ...extra) {
    const total = days.reduce((a, d) => a + d.up + d.down, 0);
    return h(
      'section',
      { class: 'card traffic' },
      h('h2', {}, t('traffic.title')),
      ...extra,
      total
        ? [
            chart(days, tn('traffic.chart', days.length, { total: bytes(total) })),
            h('p', { class: 'legend' }, h('span', { class: 'key down' }), t('traffic.down'), ' ', h('span', { class: 'key up' }), t('traffic.up')),
          ]
        : h('p', { class: 'empty' }, tn('traffic.empty', days.length)),
    );
  }

  function badge(status) {
    return h('span', { class: `badge ${status}` }, t(`status.${status}`));
  }

  // ---- the API --------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message, data) {
      super(message);
      this.status = status;
      this.code = code;
      this.data = data;
    }
  }

  /** Calls the admin API. A 401 anywhere but sign-in means the session ended. */
  async function api(method, path, body) {
    const init = { method, headers: {}, credentials: 'same-origin', cache: 'no-store' };
    if (body instanceof Blob) {
      init.headers['content-type'] = 'application/octet-stream';
      init.body = body;
    } else if (body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(`api/${path}`, init);
    } catch {
      throw new ApiError(0, 'network', t('err.network'));
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const code = data?.error?.code || `http_${response.status}`;
      // The session ended: control says `unauthorized` (a wrong password, at sign-in or to
      // confirm a change, is a 401 with a code of its own); a 401 without control's body, too.
      if (response.status === 401 && (code === 'unauthorized' || !data?.error)) {
        me = null;
        loginView(t('session_ended'));
      }
      // Every code has its words in strings.js; `{message}` and `{names}` are what control said.
      const vars = { message: data?.error?.message || '', names: (data?.error?.names || []).join(', ') };
      let message = STRINGS[lang][`err.${code}`] || STRINGS.en[`err.${code}`] ? t(`err.${code}`, vars) : data?.error?.message;
      // Rules that do not check: where, in words (which rule set, line, column).
      if (code === 'bad_routing_rules' && data.error.rule_set) message = rulesError(data.error, true);
      if (response.status === 429) {
        message = t('err.too_many', { seconds: response.headers.get('retry-after') || '60' });
      }
      throw new ApiError(response.status, code, message || t('err.unknown', { status: response.status }), data);
    }
    return data;
  }

  // ---- routing --------------------------------------------------------------------------

  let me = null;

  function hashPath() {
    const raw = location.hash.replace(/^#\/?/, '');
    const [path, query] = raw.split('?');
    return { path, params: new URLSearchParams(query || '') };
  }

  function go(path, params) {
    const query = params && params.toString();
    location.hash = `#/${path}${query ? `?${query}` : ''}`;
  }

  const ROUTES = [
    [/^$/, () => overview()],
    [/^users$/, (m, params) => usersView(params)],
    [/^users\/(\d+)$/, (m) => userView(Number(m[1]), m[0])],
    [/^nodes$/, () => nodesView()],
    [/^nodes\/(\d+)$/, (m) => nodeView(Number(m[1]), m[0])],
    [/^groups$/, () => groupsView()],
    [/^tokens$/, () => tokensView()],
    [/^releases$/, () => releasesView()],
    [/^audit$/, (m, params) => auditView(params)],
    [/^settings$/, () => settingsView()],
    [/^settings\/notifications$/, () => notificationsView()],
    [/^settings\/routing$/, () => routingView()],
    [/^admins$/, () => adminsView()],
  ];

  // ---- who is signed in -----------------------------------------------------------------

  const SCOPES = ['read', 'users', 'operate', 'admin'];

  /** Whether the admin signed in may do what needs `scope` to everyone (a reseller only ever
   * reaches their own users). */
  function can(scope) {
    return me.role !== 'reseller' && SCOPES.indexOf(me.scope) >= SCOPES.indexOf(scope);
  }

  /** Whether they may change users (a reseller: their own). */
  const canUsers = () => SCOPES.indexOf(me.scope) >= SCOPES.indexOf('users');

  /** The sections a reseller sees: their users, their tokens, their sessions. */
  const RESELLER_SECTIONS = ['users', 'tokens', 'settings'];

  async function route() {
    document.documentElement.lang = lang;
    document.documentElement.dir = STRINGS[lang]['dir'] || 'ltr';
    if (location.pathname.endsWith('/setup')) return setupView();
    if (!me) {
      try {
        me = await api('GET', 'me');
      } catch (e) {
        if (e.status === 401) return loginView();
        return mount(h('main', { class: 'narrow' }, h('p', { class: 'error', role: 'alert' }, e.message)));
      }
    }
    const { path, params } = hashPath();
    if (me.role === 'reseller' && !RESELLER_SECTIONS.includes(path.split('/')[0])) return go('users');
    if (path === 'admins' && me.role !== 'owner') return go('');
    if (path === 'settings/routing' && me.role !== 'owner') return go('settings');
    for (const [pattern, view] of ROUTES) {
      const m = path.match(pattern);
      if (m) {
        try {
          await view(m, params);
        } catch (e) {
          if (e.status !== 401) shell(path, h('p', { class: 'error', role: 'alert' }, e.message));
        }
        return;
      }
    }
    go('');
  }

  // ---- the frame ------------------------------------------------------------------------

  const NAV = [
    ['', 'nav.overview'],
    ['users', 'nav.users'],
    ['nodes', 'nav.nodes'],
    ['groups', 'nav.groups'],
    ['tokens', 'nav.tokens'],
    ['releases', 'nav.releases'],
    ['audit', 'nav.audit'],
    ['admins', 'nav.admins'],
    ['settings', 'nav.settings'],
  ];

  /** The sections the admin signed in may open. */
  function sections() {
    return NAV.filter(([path]) => {
      if (me.role === 'reseller') return RESELLER_SECTIONS.includes(path);
      return path !== 'admins' || me.role === 'owner';
    });
  }

  function languagePicker() {
    return h(
      'select',
      {
        class: 'lang',
        'aria-label': t('language'),
        onchange: (e) => {
          lang = e.target.value;
          localStorage.setItem('hearth.lang', lang);
          route();
        },
      },
      LANGS.map((l) => h('option', { value: l, selected: l === lang }, STRINGS[l]['language.name'])),
    );
  }

  /** A word for the next page drawn ("Saved."), shown once at its top. */
  let flash = null;

  function flashNotice() {
    const notice = flash ? h('p', { class: 'notice flash', role: 'status', id: 'flash' }, flash) : null;
    flash = null;
    return notice;
  }

  /** What a form's input changes against `initial` (the same form's input as it was drawn):
   * only those fields are sent, so a save never rewrites what the admin did not touch. */
  function changedOnly(input, initial) {
    const out = {};
    for (const [key, value] of Object.entries(input)) {
      if (JSON.stringify(value) !== JSON.stringify(initial[key])) out[key] = value;
    }
    return out;
  }

  /** The page drawn last (its address), to tell a new page from the same one drawn again. */
  let drawn = null;

  /** Draws the page at `current` (its path), unless the address moved on while it loaded: a
   * page that answered late never covers the one asked for after it. */
  function shell(current, ...content) {
    if (current !== hashPath().path) return;
    const section = current.split('/')[0];
    const skip = h('a', { class: 'skip', href: '#/' + current, onclick: (e) => { e.preventDefault(); focusHeading(); } }, t('skip'));
    mount(
      h(
        'header',
        { class: 'top' },
        skip,
        h('a', { class: 'brand', href: '#/' }, 'Hearth'),
        h(
          'nav',
          {},
          sections().map(([path, key]) =>
            h('a', { href: `#/${path}`, 'aria-current': section === path ? 'page' : null }, t(key)),
          ),
        ),
        h(
          'div',
          { class: 'who' },
          me.role === 'owner' ? null : h('span', { class: 'me', id: 'me' }, me.login, ' · ', t(`role.${me.role}`)),
          languagePicker(),
          h('button', { type: 'button', class: 'ghost small', id: 'sign-out', onclick: signOut }, t('sign_out')),
        ),
      ),
      h('main', {}, flashNotice(), ...content),
    );
    // The page's title names the page; on a new page (not the same one drawn again after a
    // save), focus goes to its heading, as a screen reader or a keyboard user expects.
    const heading = document.querySelector('main h1');
    document.title = heading ? `${heading.textContent} · Hearth` : 'Hearth';
    const here = location.hash.split('?')[0];
    if (drawn !== null && drawn !== here) focusHeading();
    drawn = here;
  }

  function focusHeading() {
    const heading = document.querySelector('main h1');
    if (!heading) return;
    heading.setAttribute('tabindex', '-1');
    heading.focus();
  }

  async function signOut() {
    try {
      await api('POST', 'logout');
    } finally {
      me = null;
      loginView(t('signed_out'));
    }
  }

  // ---- sign-in and setup ----------------------------------------------------------------

  // ---- passkeys -------------------------------------------------------------------------

  /** Base64url, as the API writes binary WebAuthn fields. */
  const b64u = {
    decode(text) {
      const base64 = text.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(text.length / 4) * 4, '=');
      return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0)).buffer;
    },
    encode(buffer) {
      let binary = '';
      for (const byte of new Uint8Array(buffer)) binary += String.fromCharCode(byte);
      return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
    },
  };

  const passkeysHere = () => Boolean(window.PublicKeyCredential && navigator.credentials);

  /** A passkey made by this device for the options the API gave (adding one). */
  async function createPasskey(options) {
    const key = structuredClone(options.publicKey);
    key.challenge = b64u.decode(key.challenge);
    key.user.id = b64u.decode(key.user.id);
    key.excludeCredentials = (key.excludeCredentials || []).map((c) => ({ ...c, id: b64u.decode(c.id) }));
    const made = await navigator.credentials.create({ publicKey: key });
    return {
      id: made.id,
      rawId: b64u.encode(made.rawId),
      type: made.type,
      extensions: made.getClientExtensionResults(),
      response: {
        attestationObject: b64u.encode(made.response.attestationObject),
        clientDataJSON: b64u.encode(made.response.clientDataJSON),
        transports: made.response.getTransports ? made.response.getTransports() : [],
      },
    };
  }

  /** This device's passkey signing the challenge the API gave (signing in). */
  async function usePasskey(options) {
    const key = structuredClone(options.publicKey);
    key.challenge = b64u.decode(key.challenge);
    key.allowCredentials = (key.allowCredentials || []).map((c) => ({ ...c, id: b64u.decode(c.id) }));
    const used = await navigator.credentials.get({ publicKey: key });
    return {
      id: used.id,
      rawId: b64u.encode(used.rawId),
      type: used.type,
      extensions: used.getClientExtensionResults(),
      response: {
        authenticatorData: b64u.encode(used.response.authenticatorData),
        clientDataJSON: b64u.encode(used.response.clientDataJSON),
        signature: b64u.encode(used.response.signature),
        userHandle: used.response.userHandle ? b64u.encode(used.response.userHandle) : null,
      },
    };
  }

  /** Signs in with a passkey: alone, or (a ticket from a password) as the second factor. */
  async function passkeySignIn(ceremony) {
    const { ticket, options } = ceremony || (await api('POST', 'login/passkey', {}));
    let credential;
    try {
      credential = await usePasskey(options);
    } catch (e) {
      throw new Error(t('passkeys.cancelled'));
    }
    await api('POST', 'login/passkey/finish', { ticket, credential });
    me = await api('GET', 'me');
    route();
  }

  function loginView(notice) {
    const code = field(
      t('totp.code'),
      h('input', { name: 'code', autocomplete: 'one-time-code', inputmode: 'numeric', maxlength: 20 }),
      t('totp.code_hint'),
    );
    code.hidden = true;
    const form = h(
      'form',
      { class: 'card', id: 'login' },
      h('h1', {}, t('sign_in')),
      notice ? h('p', { class: 'notice' }, notice) : null,
      field(t('login'), h('input', { name: 'login', autocomplete: 'username', required: true, autofocus: true })),
      field(t('password'), h('input', { name: 'password', type: 'password', autocomplete: 'current-password', required: true })),
      code,
      errorBox(),
      h(
        'div',
        { class: 'actions' },
        languagePicker(),
        passkeysHere()
          ? h('button', { type: 'button', class: 'ghost', id: 'passkey-sign-in', onclick: () => submitting(form, () => passkeySignIn()) }, t('passkeys.sign_in'))
          : null,
        h('button', { type: 'submit' }, t('sign_in')),
      ),
    );
    onSubmit(form, async () => {
      const values = fields(form);
      const body = { login: values.login, password: values.password };
      if (!code.hidden && values.code) body.code = values.code;
      try {
        await api('POST', 'login', body);
      } catch (err) {
        if (typeof err.data?.tries_left === 'number') {
          const left = err.data.tries_left;
          err.message = `${err.message} ${left > 0 ? tn('login.tries_left', left) : t('login.locked')}`;
        }
        if (err.status === 429 && code.hidden) {
          // Strangers spent this login's tries: with two-step sign-in on, the code still
          // lets the owner in.
          code.hidden = false;
          err.message = `${err.message} ${t('login.code_gets_in')}`;
        }
        // The password was right; a passkey of theirs confirms it.
        if (err.code === 'passkey_required' && passkeysHere()) return passkeySignIn(err.data);
        if (err.code !== 'totp_required') throw err;
        // The password was right; two-step sign-in is on: ask for the code.
        code.hidden = false;
        code.querySelector('input').focus();
        return;
      }
      me = await api('GET', 'me');
      route();
    });
    mount(h('main', { class: 'narrow' }, form));
  }

  function setupView() {
    const token = location.hash.replace(/^#/, '');
    const form = h(
      'form',
      { class: 'card', id: 'setup' },
      h('h1', {}, t('setup.title')),
      h('p', {}, t('setup.intro')),
      field(t('login'), h('input', { name: 'login', autocomplete: 'username', required: true, autofocus: true })),
      field(
        t('password'),
        h('input', { name: 'password', type: 'password', autocomplete: 'new-password', required: true, minlength: 10 }),
        t('setup.password_hint'),
      ),
      field(t('setup.repeat'), h('input', { name: 'repeat', type: 'password', autocomplete: 'new-password', required: true })),
      errorBox(),
      h('div', { class: 'actions' }, languagePicker(), h('button', { type: 'submit' }, t('setup.create'))),
    );
    onSubmit(form, async () => {
      const { login, password, repeat } = fields(form);
      if (password !== repeat) throw new Error(t('setup.mismatch'));
      await api('POST', 'setup', { token, login, password });
      me = await api('GET', 'me');
      // The setup link is spent: leave it, and its token, out of the address bar and history.
      history.replaceState(null, '', './#/');
      await setupDone();
    });
    mount(h('main', { class: 'narrow' }, token ? form : h('p', { class: 'error' }, t('setup.no_token'))));
  }

  async function setupDone() {
    const settings = await api('GET', 'settings');
    mount(
      h(
        'main',
        { class: 'narrow' },
        h(
          'section',
          { class: 'card', id: 'setup-done' },
          h('h1', {}, t('setup.done')),
          h('h2', {}, t('setup.root_title')),
          h('p', {}, t('setup.root_text')),
          addressesForm(settings),
          h('h2', {}, t('setup.next_title')),
          h('ol', {}, h('li', {}, t('setup.next_edge')), h('li', {}, t('setup.next_node')), h('li', {}, t('setup.next_user'))),
          // The address is already #/ (set when setup finished), so a link would not navigate.
          h('div', { class: 'actions' }, h('button', { type: 'button', id: 'setup-continue', onclick: () => route() }, t('setup.continue'))),
        ),
      ),
    );
  }

  // ---- overview -------------------------------------------------------------------------

  async function overview() {
    const [status, traffic, online] = await Promise.all([api('GET', 'status'), api('GET', 'usage?days=30'), api('GET', 'online')]);
    const users = status.users || {};
    const total = Object.values(users).reduce((a, b) => a + b, 0);
    const offline = status.nodes.total - status.nodes.online;
    // Each alert names what it is about and links to where it is put right.
    const alerts = [];
    const alert = (text, href) => alerts.push(href ? h('a', { href }, text) : text);
    const named = (status.nodes.offline || []).slice(0, 5);
    for (const node of named) {
      const text = node.never ? t('alert.node_never', { name: node.name }) : t('alert.node_offline', { name: node.name, when: ago(node.last_seen) });
      alert(text, `#/nodes/${node.id}`);
    }
    if (offline > named.length) alert(tn('alert.nodes_offline_more', offline - named.length), '#/nodes');
    if (status.nodes.sets_expiring > 0) alert(tn('alert.sets_expiring', status.nodes.sets_expiring), '#/nodes');
    for (const node of status.nodes.limited || []) alert(t('alert.node_limited', { name: node.name, when: date(node.until) }), `#/nodes/${node.id}`);
    for (const edge of status.edges || []) {
      if (edge.disk_full_since) alert(t('alert.edge_disk_full', { name: edge.name, since: ago(edge.disk_full_since) }), '#/settings');
      else if (edge.last_error) alert(t('alert.edge_error', { name: edge.name, error: edge.last_error }), '#/settings');
      if (edge.untrusted_forwarding) alert(t('alert.edge_forwarding', { name: edge.name, address: whole(edge.untrusted_forwarding) }));
    }
    if (status.untrusted_forwarding) alert(t('alert.control_forwarding', { address: whole(status.untrusted_forwarding) }));
    if (status.edge.held_total > 0) {
      const first = status.edge.held[0];
      alert(tn('alert.edge_held', status.edge.held_total, { stream: first.stream, reason: first.reason }), '#/settings');
    }
    if (!status.edge.url) alert(t('alert.no_edge'), '#/settings');
    if (status.keys && status.keys.offline_here.length) {
      alert(t('alert.keys_here', { files: status.keys.offline_here.join(', ') }));
    }
    const stat = (label, value, href, cls) =>
      h('a', { class: `stat ${cls || ''}`, href }, h('strong', {}, number(value)), h('span', {}, label));
    shell(
      '',
      h('h1', {}, t('nav.overview')),
      alerts.length ? h('div', { role: 'status' }, h('ul', { class: 'alerts' }, alerts.map((a) => h('li', {}, a)))) : null,
      h(
        'section',
        { class: 'stats', 'aria-label': t('nav.users') },
        stat(t('overview.users'), total, '#/users'),
        ['active', 'not_started', 'expired', 'over_quota', 'disabled'].map((s) =>
          stat(t(`status.${s}`), users[s] || 0, `#/users?status=${s}`, s),
        ),
      ),
      h(
        'section',
        { class: 'stats', 'aria-label': t('nav.nodes') },
        stat(t('overview.nodes_online'), status.nodes.online, '#/nodes', 'active'),
        stat(t('overview.nodes_offline'), offline, '#/nodes', offline ? 'expired' : ''),
      ),
      h(
        'section',
        { class: 'card', id: 'online' },
        h('h2', { id: 'online-title' }, t('online.title')),
        h('p', {}, t('online.summary', { users: number(online.users), devices: number(online.devices) })),
        online.online.length
          ? h(
              'table',
              { 'aria-labelledby': 'online-title' },
              h('thead', {}, h('tr', {}, ['online.user', 'devices.title', 'nav.nodes'].map((k) => h('th', { scope: 'col' }, t(k))))),
              h(
                'tbody',
                {},
                online.online.map((u) =>
                  h(
                    'tr',
                    {},
                    h('th', { scope: 'row' }, h('a', { href: `#/users/${u.id}` }, u.name)),
                    h('td', {}, t('online.devices', { n: number(u.devices), connections: number(u.connections) })),
                    h('td', {}, u.nodes.join(', ')),
                  ),
                ),
              ),
            )
          : null,
      ),
      trafficCard(
        traffic.days,
        h(
          'dl',
          {},
          h('dt', {}, t('traffic.today')),
          h('dd', {}, bytes(traffic.today.up + traffic.today.down)),
          h('dt', {}, t('traffic.month')),
          h('dd', {}, bytes(traffic.month.up + traffic.month.down)),
        ),
      ),
      h(
        'section',
        { class: 'card' },
        h('h2', { id: 'edges-title' }, t('overview.edges')),
        (status.edges || []).length
          ? h(
              'table',
              { class: 'list', 'aria-labelledby': 'edges-title' },
              h(
                'thead',
                {},
                h(
                  'tr',
                  {},
                  ['overview.edge_name', 'overview.edge_links', 'overview.pending', 'overview.last_push'].map((k) =>
                    h('th', { scope: 'col' }, t(k)),
                  ),
                ),
              ),
              h(
                'tbody',
                {},
                status.edges.map((edge) =>
                  h(
                    'tr',
                    {},
                    h('th', { scope: 'row', 'data-label': t('overview.edge_name') }, edge.name, h('br'), h('small', { class: 'url' }, edge.link_base || edge.url)),
                    h('td', { 'data-label': t('overview.edge_links') }, t(`edge.${edge.state}`)),
                    h('td', { 'data-label': t('overview.pending') }, number(edge.pending)),
                    h('td', { 'data-label': t('overview.last_push') }, edge.last_error ? t('overview.failing', { since: ago(edge.failing_since) }) : ago(edge.last_push)),
                  ),
                ),
              ),
            )
          : h('p', {}, t('overview.edge_none')),
      ),
    );
  }

  // ---- users ----------------------------------------------------------------------------

  const STATUSES = ['active', 'not_started', 'expired', 'over_quota', 'disabled'];
  const RESETS = ['none', 'daily', 'weekly', 'monthly', 'rolling30'];
  const PER_PAGE = 50;

  /** Whether the users page is being drawn again for a search typed in its box. */
  let searching = false;

  async function usersView(params) {
    const page = Math.max(1, Number(params.get('page')) || 1);
    const query = new URLSearchParams({ page, per_page: PER_PAGE });
    for (const key of ['q', 'status', 'group']) if (params.get(key)) query.set(key, params.get(key));
    const [list, groups, who] = await Promise.all([
      api('GET', `users?${query}`),
      api('GET', 'groups'),
      // A reseller's limits and use change with every user: asked again each time.
      me.role === 'reseller' ? api('GET', 'me') : me,
    ]);
    me = who;

    const filter = (key, value) => {
      const next = new URLSearchParams(params);
      if (value) next.set(key, value);
      else next.delete(key);
      next.delete('page');
      go('users', next);
    };
    let typing;
    const search = h('input', {
      type: 'search',
      name: 'q',
      placeholder: t('users.search'),
      'aria-label': t('users.search'),
      value: params.get('q') || '',
      oninput: (e) => {
        clearTimeout(typing);
        typing = setTimeout(() => {
          searching = true;
          filter('q', e.target.value.trim());
        }, 300);
      },
    });
    const statusFilter = h(
      'select',
      { 'aria-label': t('users.status'), onchange: (e) => filter('status', e.target.value) },
      h('option', { value: '' }, t('users.any_status')),
      STATUSES.map((s) => h('option', { value: s, selected: params.get('status') === s }, t(`status.${s}`))),
    );
    const groupFilter = h(
      'select',
      { 'aria-label': t('users.group'), onchange: (e) => filter('group', e.target.value) },
      h('option', { value: '' }, t('users.any_group')),
      groups.groups.map((g) => h('option', { value: g.name, selected: params.get('group') === g.name }, g.name)),
    );

    const first = list.total ? (page - 1) * PER_PAGE + 1 : 0;
    const last = Math.min(page * PER_PAGE, list.total);
    const pageLink = (n, label) => {
      const next = new URLSearchParams(params);
      next.set('page', n);
      return h('a', { class: 'button ghost small', href: `#/users?${next}` }, label);
    };

    const rows = list.users.map((u) =>
      h(
        'tr',
        {},
        h('td', { 'data-label': t('users.name') }, h('a', { href: `#/users/${u.id}` }, u.name)),
        h('td', { 'data-label': t('users.status') }, badge(u.status)),
        h('td', { 'data-label': t('users.traffic') }, usage(u)),
        h('td', { 'data-label': t('users.expires') }, u.expires_at ? date(u.expires_at) : u.duration_days ? tn('users.days_from_first_use', u.duration_days) : t('never')),
        h('td', { 'data-label': t('users.groups') }, u.groups.join(', ')),
      ),
    );

    const live = document.querySelector('.toolbar input[type=search]');
    shell(
      'users',
      h(
        'div',
        { class: 'title' },
        h('h1', {}, t('nav.users')),
        h(
          'div',
          { class: 'actions' },
          canUsers() ? h('button', { type: 'button', id: 'new-user', onclick: () => userDialog(groups.groups) }, t('users.new')) : null,
          canUsers() ? h('button', { type: 'button', class: 'ghost', onclick: () => bulkDialog(groups.groups) }, t('users.bulk')) : null,
        ),
      ),
      me.limits ? limitsCard(me.limits) : null,
      h('div', { class: 'toolbar' }, search, statusFilter, groupFilter),
      list.users.length
        ? h(
            'table',
            { class: 'list' },
            h(
              'thead',
              {},
              h('tr', {}, ['users.name', 'users.status', 'users.traffic', 'users.expires', 'users.groups'].map((k) => h('th', {}, t(k)))),
            ),
            h('tbody', {}, rows),
          )
        : h('p', { class: 'empty' }, t('users.none')),
      h(
        'nav',
        { class: 'pager', 'aria-label': t('pages') },
        h('span', {}, t('users.range', { first: number(first), last: number(last), total: number(list.total) })),
        page > 1 ? pageLink(page - 1, t('previous')) : null,
        last < list.total ? pageLink(page + 1, t('next')) : null,
      ),
    );
    // The page is drawn again for each search: the box keeps the focus, and what was typed
    // while the list loaded (down to an empty box), whatever it is.
    if (searching) {
      searching = false;
      const typed = live && live.value;
      if (typed != null && typed.trim() !== (params.get('q') || '')) {
        search.value = typed;
        search.dispatchEvent(new Event('input'));
      }
      search.focus();
      search.setSelectionRange(search.value.length, search.value.length);
    }
  }

  /** What a reseller has given out, against the limits the owner set. */
  function limitsCard(limits) {
    const of = (used, max, show) => (max === null ? t('admins.of_unlimited', { used: show(used) }) : t('admins.of', { used: show(used), max: show(max) }));
    return h(
      'section',
      { class: 'card', id: 'limits', 'aria-label': t('admins.limits') },
      h(
        'dl',
        { class: 'limits' },
        h('div', {}, h('dt', {}, t('nav.users')), h('dd', {}, of(limits.users, limits.max_users, number))),
        h('div', {}, h('dt', {}, t('admins.traffic_given')), h('dd', {}, of(limits.allotted + limits.spent, limits.max_traffic, bytes))),
        limits.max_slow_speed !== null || limits.max_traffic !== null
          ? h('div', {}, h('dt', {}, t('admins.max_slow')), h('dd', {}, limits.max_slow_speed ? t('speed.mbps', { n: number(limits.max_slow_speed) }) : t('admins.cut_only')))
          : null,
        limits.max_days !== null ? h('div', {}, h('dt', {}, t('admins.max_days')), h('dd', {}, t('admins.days', { n: number(limits.max_days) }))) : null,
        h('div', {}, h('dt', {}, t('users.groups')), h('dd', {}, limits.groups.length ? limits.groups.join(', ') : t('admins.no_groups'))),
      ),
    );
  }

  function usage(u) {
    const used = u.used_up + u.used_down;
    // A quota of 0 is none, as the form's hint says.
    const text = `${bytes(used)} / ${u.quota ? bytes(u.quota) : t('users.unlimited')}`;
    const share = u.quota ? Math.min(100, (used / u.quota) * 100) : 0;
    const fill = h('span', {});
    // Set through the CSSOM: the Content-Security-Policy allows no inline style attributes.
    fill.style.width = `${share.toFixed(1)}%`;
    return h('span', { class: 'usage' }, text, u.quota ? h('span', { class: 'bar', 'aria-hidden': 'true' }, fill) : null);
  }

  /** Settings shared by the create, bulk and edit forms; `ruleSets` (the owner's, to choose
   * from) adds the user's own rule set. */
  function userFields(groups, user, ruleSets) {
    const gib = user && user.quota ? String(user.quota / 2 ** 30) : '';
    return [
      field(t('users.quota_gib'), h('input', { name: 'quota', type: 'number', min: 0, step: 'any', inputmode: 'decimal', value: gib }), t('users.quota_hint')),
      user
        ? field(t('users.expires'), h('input', { name: 'expires', type: 'date', value: user.expires_at ? new Date(user.expires_at * 1000).toISOString().slice(0, 10) : '' }), t('users.expires_hint'))
        : field(t('users.days'), h('input', { name: 'days', type: 'number', min: 1, max: 36500, step: 1, inputmode: 'numeric' }), t('users.days_hint')),
      user ? null : h('label', { class: 'check' }, h('input', { name: 'start_on_first_use', type: 'checkbox' }), t('users.start_on_first_use')),
      field(
        t('users.reset'),
        h('select', { name: 'reset' }, RESETS.map((r) => h('option', { value: r, selected: (user ? user.reset : 'none') === r }, t(`reset.${r}`)))),
      ),
      speedFields(user && user.speed_limit, user ? user.on_quota : 'group', user && user.slow_speed, true),
      field(
        t('devices.limit'),
        h('input', { name: 'device_limit', type: 'number', min: 0, max: 1000, step: 1, inputmode: 'numeric', placeholder: t('speed.from_group'), value: user && user.device_limit !== null ? String(user.device_limit) : '' }),
        t('devices.limit_hint_user'),
      ),
      ruleSets ? ruleSetField(ruleSets, user ? user.rule_set : null, 'routing.from_groups', 'routing.rule_set_hint_user') : null,
      groups.length
        ? h(
            'fieldset',
            { class: 'groups' },
            h('legend', {}, t('users.groups')),
            groups.map((g) =>
              h('label', { class: 'check' }, h('input', { type: 'checkbox', name: `group:${g.name}`, checked: user ? user.groups.includes(g.name) : me.role === 'reseller' || g.name === 'default' }), g.name),
            ),
          )
        : null,
      field(t('users.note'), h('textarea', { name: 'note', rows: 2, maxlength: 1000 }, user ? user.note : '')),
    ];
  }

  /** A rate field's value: a number of Mbit/s, or null when empty (the group's default). */
  function rate(value) {
    return value === undefined || value === '' ? null : Number(value);
  }

  /** Speed limit and what a used-up quota does, for a user (`own`: empty means the group's
   * default) or a group (empty means none). */
  function speedFields(limit, onQuota, slow, own) {
    const value = (side) => (limit && limit[side] !== null && limit[side] !== undefined && (own || limit[side]) ? String(limit[side]) : '');
    const input = (name, side) =>
      h('input', { name, type: 'number', min: 0, max: 100000, step: 'any', inputmode: 'decimal', placeholder: t(own ? 'speed.from_group' : 'speed.none'), value: value(side) });
    const actions = own ? ['group', 'cut', 'slow'] : ['cut', 'slow'];
    return h(
      'fieldset',
      { class: 'speed' },
      h('legend', {}, t('speed.title')),
      field(t('speed.down'), input('speed_down', 'down'), t(own ? 'speed.hint_user' : 'speed.hint_group')),
      field(t('speed.up'), input('speed_up', 'up')),
      field(t('speed.on_quota'), h('select', { name: 'on_quota' }, actions.map((a) => h('option', { value: a, selected: onQuota === a }, t(`speed.on_quota_${a}`))))),
      field(t('speed.slow'), h('input', { name: 'slow_speed', type: 'number', min: 0, max: 100000, step: 'any', inputmode: 'decimal', value: slow ? String(slow) : '' }), t('speed.slow_hint')),
    );
  }

  /** The speed settings of a form, as the API takes them. */
  function speedInput(values, own) {
    const side = (v) => (own ? rate(v) : rate(v) || 0);
    const input = { speed_limit: { up: side(values.speed_up), down: side(values.speed_down) }, on_quota: values.on_quota };
    if (values.slow_speed) input.slow_speed = Number(values.slow_speed);
    return input;
  }

  /** A speed limit as people read it. */
  function speedText(limit, fallback) {
    const side = (v) => (v === null || v === undefined ? fallback : v === 0 ? t('speed.unlimited') : t('speed.mbps', { n: number(v) }));
    return t('speed.down_up', { down: side(limit.down), up: side(limit.up) });
  }

  /** A group's device limit and abuse guard. */
  function fairFields(group) {
    return h(
      'fieldset',
      { class: 'fair' },
      h('legend', {}, t('devices.fair_use')),
      field(
        t('devices.limit'),
        h('input', { name: 'device_limit', type: 'number', min: 0, max: 1000, step: 1, inputmode: 'numeric', placeholder: t('speed.none'), value: group && group.device_limit ? String(group.device_limit) : '' }),
        t('devices.limit_hint_group'),
      ),
      h('label', { class: 'check' }, h('input', { name: 'block_torrent', type: 'checkbox', checked: Boolean(group && group.block_torrent) }), t('guard.torrent')),
      h('label', { class: 'check' }, h('input', { name: 'block_smtp', type: 'checkbox', checked: Boolean(group && group.block_smtp) }), t('guard.smtp')),
      h('small', {}, t('guard.hint')),
    );
  }

  /** The fair-use settings of a group form, as the API takes them. */
  function fairInput(values) {
    return { device_limit: values.device_limit ? Number(values.device_limit) : 0, block_torrent: values.block_torrent, block_smtp: values.block_smtp };
  }

  /** Who of a user is connected, against its limit, and what was refused. */
  function devicesText(d) {
    const online = d.limit ? t('devices.online_of', { n: number(d.online), limit: number(d.limit) }) : t('devices.online', { n: number(d.online) });
    return [
      online,
      d.nodes.length ? h('small', {}, ` · ${d.nodes.join(', ')}`) : null,
      d.refused ? h('div', {}, t('devices.refused', { n: number(d.refused), when: dateTime(d.refused_at) })) : null,
      d.refused_torrent || d.refused_smtp ? h('div', {}, h('small', {}, t('guard.refused', { torrent: number(d.refused_torrent), smtp: number(d.refused_smtp) }))) : null,
    ];
  }

  function userInput(values, groups) {
    const input = { reset: values.reset, note: values.note, ...speedInput(values, true) };
    input.device_limit = values.device_limit === '' ? 'group' : Number(values.device_limit);
    input.quota = values.quota ? Math.round(Number(values.quota) * 2 ** 30) : 0;
    if (values.days) input.days = Number(values.days);
    if (values.start_on_first_use) input.start_on_first_use = true;
    if ('expires' in values) input.expires_at = values.expires ? Math.floor(Date.parse(`${values.expires}T23:59:59Z`) / 1000) : 0;
    if (groups.length) input.groups = groups.filter((g) => values[`group:${g.name}`]).map((g) => g.name);
    if ('rule_set' in values) input.rule_set = values.rule_set;
    return input;
  }

  function userDialog(groups) {
    const form = h(
      'form',
      { id: 'user-form' },
      field(t('users.name'), h('input', { name: 'name', required: true, autofocus: true })),
      userFields(groups),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('users.create'))),
    );
    const d = dialog(t('users.new'), form);
    onSubmit(form, async () => {
      const values = fields(form);
      const user = await api('POST', 'users', { name: values.name, ...userInput(values, groups) });
      d.close();
      go(`users/${user.id}`);
    });
  }

  function bulkDialog(groups) {
    const form = h(
      'form',
      { id: 'bulk-form' },
      field(t('users.names'), h('textarea', { name: 'names', rows: 6, required: true, autofocus: true }), t('users.names_hint')),
      userFields(groups),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('users.create_all'))),
    );
    const d = dialog(t('users.bulk'), form);
    onSubmit(form, async () => {
      const values = fields(form);
      const names = values.names.split('\n').map((n) => n.trim()).filter(Boolean);
      const result = await api('POST', 'users/bulk', { names, settings: userInput(values, groups) });
      const text = result.users.map((u) => `${u.name}\t${u.link}`).join('\n') + '\n';
      // The links as a file of their own (a blob: URL, which the panel's policy allows).
      const file = URL.createObjectURL(new Blob([text], { type: 'text/plain;charset=utf-8' }));
      const links = h('textarea', { class: 'links', rows: 8, readonly: true, 'aria-label': tn('users.created_n', result.created) }, text);
      form.replaceChildren(
        h('p', { role: 'status' }, tn('users.created_n', result.created)),
        h('div', { class: 'secret' }, links, copyButton(text)),
        h(
          'div',
          { class: 'actions' },
          h('a', { class: 'button ghost', href: file, download: `hearth-links-${new Date().toISOString().slice(0, 10)}.txt`, id: 'download-links' }, t('users.download_links')),
          h('button', { type: 'button', onclick: () => d.close() }, t('done')),
        ),
      );
      // However the dialog is closed (Done, Esc, ×), the list shows who was added; a dialog
      // closed because the page changed leaves the new page alone.
      const listed = location.hash;
      d.addEventListener('close', () => {
        URL.revokeObjectURL(file);
        if (location.hash === listed) route();
      });
    });
  }

  async function userView(id, path) {
    const [user, groups, link, traffic, hwid, aliases, routing] = await Promise.all([
      api('GET', `users/${id}`),
      api('GET', 'groups'),
      api('GET', `users/${id}/link`),
      api('GET', `users/${id}/usage?days=30`),
      api('GET', `users/${id}/hwid`),
      api('GET', `users/${id}/aliases`),
      // Who is routed where is the owner's to say.
      me.role === 'owner' ? api('GET', 'routing') : null,
    ]);
    const act = (label, path, body, confirmText, cls) =>
      h('button', {
        type: 'button',
        class: cls || 'ghost',
        onclick: async (e) => {
          if (confirmText && !(await confirmAction(confirmText, label))) return;
          const box = document.getElementById('user-actions-error');
          box.hidden = true;
          e.target.disabled = true;
          try {
            if (path === null) {
              await api('DELETE', `users/${id}`);
              return go('users');
            }
            await api('POST', `users/${id}/${path}`, body);
            route();
          } catch (err) {
            box.textContent = err.message;
            box.hidden = false;
            e.target.disabled = false;
          }
        },
      }, label);

    const edit = h(
      'form',
      { class: 'card', id: 'user-edit' },
      h('h2', {}, t('users.edit')),
      field(t('users.name'), h('input', { name: 'name', required: true, value: user.name })),
      userFields(groups.groups, user, routing && routing.rule_sets),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('save'))),
    );
    const editInput = () => {
      const values = fields(edit);
      return { name: values.name, ...userInput(values, groups.groups) };
    };
    const drawn = editInput();
    onSubmit(edit, async () => {
      await api('PATCH', `users/${id}`, changedOnly(editInput(), drawn));
      flash = t('saved_user');
      route();
    });

    // A user with no end date gets one from today: the button says so, and asks first.
    const endless = !user.expires_at && !user.duration_days;
    const extend = h('form', { class: 'inline', id: 'extend' },
      h('input', { name: 'days', type: 'number', min: 1, max: 36500, step: 1, value: 30, 'aria-label': t('users.days'), inputmode: 'numeric' }),
      h('button', { type: 'submit', class: 'ghost' }, t(endless ? 'users.end_in' : 'users.extend')),
      endless ? h('small', { id: 'extend-hint' }, t('users.end_in_hint')) : null,
      errorBox(),
    );
    onSubmit(extend, async () => {
      const days = Number(fields(extend).days);
      if (endless && !(await confirmAction(t('users.end_in_confirm', { name: user.name, when: date(Date.now() / 1000 + days * 86400) }), t('users.end_in')))) return;
      await api('POST', `users/${id}/extend`, { days });
      route();
    });

    shell(
      path,
      h(
        'p',
        { class: 'crumbs' },
        h('a', { href: '#/users' }, t('nav.users')),
        me.role === 'reseller' ? null : [' · ', h('a', { href: `#/audit?user=${id}`, id: 'user-history' }, t('users.history'))],
      ),
      h('div', { class: 'title' }, h('h1', {}, user.name), badge(user.status)),
      h(
        'section',
        { class: 'card link', id: 'link' },
        h('h2', {}, t('users.link')),
        h('p', {}, t('users.link_hint')),
        secretBox(link.link),
        link.qr_svg ? h('img', { class: 'qr', alt: t('users.qr'), src: `data:image/svg+xml;charset=utf-8,${encodeURIComponent(link.qr_svg)}` }) : null,
        (link.links || []).filter((m) => m.link !== link.link).length
          ? h(
              'details',
              { id: 'mirrors' },
              h('summary', {}, t('users.mirrors')),
              h('p', {}, t('users.mirrors_hint')),
              (link.links || [])
                .filter((m) => m.link !== link.link)
                .map((m) => h('div', {}, h('small', {}, `${m.edge} (${t(`edge.${m.state}`)})`), secretBox(m.link))),
            )
          : null,
      ),
      h(
        'section',
        { class: 'card' },
        h(
          'dl',
          {},
          h('dt', {}, t('users.traffic')),
          h(
            'dd',
            { id: 'user-traffic' },
            usage(user),
            ' ',
            h('small', {}, t('users.up_down', { up: bytes(user.used_up), down: bytes(user.used_down) })),
            user.raw_up !== user.used_up || user.raw_down !== user.used_down
              ? h('div', {}, h('small', {}, t('users.raw', { n: bytes(user.raw_up + user.raw_down) })))
              : null,
          ),
          h('dt', {}, t('users.expires')),
          h('dd', {}, user.expires_at ? date(user.expires_at) : user.duration_days ? tn('users.days_from_first_use', user.duration_days) : t('never')),
          h('dt', {}, t('users.reset')),
          h('dd', {}, t(`reset.${user.reset}`), user.next_reset ? ` (${date(user.next_reset)})` : ''),
          h('dt', {}, t('users.groups')),
          h('dd', {}, user.groups.join(', ') || '—'),
          h('dt', {}, t('speed.title')),
          h('dd', { id: 'user-speed' }, speedText(user.speed_limit, t('speed.from_group'))),
          h('dt', {}, t('speed.on_quota')),
          h('dd', {}, user.on_quota === 'slow' ? t('speed.slowed_to', { n: number(user.slow_speed) }) : t(`speed.on_quota_${user.on_quota}`)),
          h('dt', {}, t('devices.title')),
          h('dd', { id: 'user-devices' }, devicesText(user.devices)),
          routing || user.routed_by
            ? [
                h('dt', {}, t('routing.routed_by')),
                h(
                  'dd',
                  { id: 'user-routing' },
                  user.routed_by ? [routing ? h('a', { href: '#/settings/routing' }, user.routed_by) : user.routed_by, h('small', {}, ` · ${t(user.rule_set ? 'routing.own' : 'routing.from_group')}`)] : t('routing.routed_none'),
                ),
              ]
            : null,
          h('dt', {}, t('users.created')),
          h('dd', {}, dateTime(user.created)),
        ),
        h('p', { class: 'error', id: 'user-actions-error', role: 'alert', hidden: true }),
        h(
          'div',
          { class: 'actions wrap' },
          user.enabled ? act(t('users.disable'), 'disable', undefined, null, 'ghost') : act(t('users.enable'), 'enable'),
          extend,
          act(t('users.reset_traffic'), 'reset-traffic', undefined, t('users.reset_confirm')),
          act(t('users.rotate'), 'rotate', undefined, t('users.rotate_confirm')),
          act(t('users.kick'), 'kick', {}, t('users.kick_confirm')),
          act(t('delete'), null, undefined, t('users.delete_confirm', { name: user.name }), 'danger'),
        ),
      ),
      hwidCard(id, hwid),
      aliases.aliases.length ? aliasesCard(id, aliases.aliases) : null,
      telegramCard(user),
      trafficCard(traffic.days),
      previewCard(id),
      edit,
    );
  }

  /** The user's own Telegram chat: the bot tells it of its quota and expiry (when the owner
   * turned that on in Notifications). */
  function telegramCard(user) {
    const form = h(
      'form',
      { class: 'card', id: 'user-telegram' },
      h('h2', {}, t('tg.user_title')),
      field(t('tg.user_chat'), h('input', { name: 'chat_id', type: 'number', step: 1, value: user.telegram_id ?? '' }), t('tg.user_hint')),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'ghost' }, t('save'))),
    );
    onSubmit(form, async () => {
      const value = form.querySelector('[name=chat_id]').value.trim();
      await api('PUT', `users/${user.id}/telegram`, { chat_id: value === '' ? null : Number(value) });
      route();
    });
    return form;
  }

  /** Old subscription paths (from the panel the user was imported from) that the edges
   * serve like the link, each retired on its own. */
  function aliasesCard(id, aliases) {
    return h(
      'section',
      { class: 'card', id: 'aliases' },
      h('h2', {}, t('aliases.title')),
      h('p', {}, t('aliases.intro')),
      h(
        'table',
        { class: 'list' },
        h('thead', {}, h('tr', {}, ['aliases.path', 'aliases.source', ''].map((k) => h('th', {}, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions')))))),
        h(
          'tbody',
          {},
          aliases.map((a) =>
            h(
              'tr',
              {},
              h('td', { 'data-label': t('aliases.path') }, h('code', {}, a.path)),
              h('td', { 'data-label': t('aliases.source') }, a.source),
              h('td', {}, deleteButton(t('aliases.retire'), t('aliases.retire_confirm', { path: a.path }), `users/${id}/aliases?path=${encodeURIComponent(a.path)}`, { 'aria-label': t('aliases.retire_one', { path: a.path }) })),
            ),
          ),
        ),
      ),
    );
  }

  /** The apps registered by their device id when they fetched the link, with a delete each. */
  function hwidCard(id, hwid) {
    const name = (d) => [d.app, d.model].filter(Boolean).join(' · ') || d.key.slice(0, 8);
    const os = (d) => [d.os, d.os_version].filter(Boolean).join(' ') || '—';
    return h(
      'section',
      { class: 'card', id: 'hwid' },
      h('h2', {}, t('hwid.title')),
      h('p', {}, hwid.limit ? t('hwid.intro', { n: number(hwid.devices.length), limit: number(hwid.limit) }) : t('hwid.no_limit')),
      hwid.refused_at ? h('p', { id: 'hwid-refused' }, t('hwid.refused', { when: dateTime(hwid.refused_at) })) : null,
      hwid.devices.length
        ? h(
            'table',
            { class: 'list', id: 'hwid-devices' },
            h('thead', {}, h('tr', {}, ['hwid.app', 'hwid.os', 'hwid.first_seen', 'hwid.last_seen', ''].map((k) => h('th', {}, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions')))))),
            h(
              'tbody',
              {},
              hwid.devices.map((d) =>
                h(
                  'tr',
                  { 'data-device': d.key },
                  h('td', { 'data-label': t('hwid.app') }, name(d)),
                  h('td', { 'data-label': t('hwid.os') }, os(d)),
                  h('td', { 'data-label': t('hwid.first_seen') }, dateTime(d.first_seen)),
                  h('td', { 'data-label': t('hwid.last_seen') }, dateTime(d.last_seen)),
                  h('td', {}, deleteButton(t('delete'), t('hwid.delete_confirm', { name: name(d) }), `users/${id}/hwid/${d.key}`, { 'aria-label': t('hwid.delete', { name: name(d) }) })),
                ),
              ),
            ),
          )
        : h('p', { class: 'empty' }, t('hwid.none')),
    );
  }

  /** Apps people use, with the User-Agent each sends when it fetches a link. */
  const APPS = [
    ['v2rayN / v2rayNG', 'v2rayN/7.12.5'],
    ['Hiddify', 'HiddifyNext/2.5.7 (android) like ClashMeta v2rayNG v2rayN sing-box'],
    ['sing-box (Android)', 'SFA/1.12.4 (Android 14; sing-box 1.12.4; language en_US)'],
    ['sing-box (iOS)', 'SFI/1.13.0 (Apple iOS 18.1; sing-box 1.13.0)'],
    ['Clash Verge', 'clash-verge/v2.2.3'],
    ['FlClash', 'FlClash/v0.8.80 clash-verge Platform/android'],
    ['Happ', 'Happ/3.2.1'],
    ['Shadowrocket', 'Shadowrocket/2.2.65'],
    ['Surge', 'Surge iOS/3374'],
    ['Loon', 'Loon/877 CFNetwork/3826.500.131 Darwin/24.5.0'],
    [null, 'Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0'],
  ];

  function previewCard(id) {
    const out = h('div', { class: 'preview', id: 'preview-out' });
    const custom = h('input', { name: 'ua', placeholder: 'User-Agent', 'aria-label': 'User-Agent' });
    const show = async (ua) => {
      try {
        const answer = await api('GET', `users/${id}/preview?ua=${encodeURIComponent(ua)}`);
        out.replaceChildren(
          h('p', {}, t('preview.format'), ' ', h('strong', { id: 'preview-format' }, answer.format)),
          h('pre', { tabindex: 0 }, answer.headers.map(([name, value]) => `${name}: ${value}`).join('\n'), '\n\n', answer.body),
        );
      } catch (err) {
        out.replaceChildren(h('p', { class: 'error', role: 'alert' }, err.message));
      }
    };
    const apps = h(
      'select',
      {
        name: 'app',
        'aria-label': t('preview.app'),
        onchange: (e) => {
          custom.value = e.target.value;
          show(e.target.value);
        },
      },
      h('option', { value: '' }, t('preview.pick')),
      APPS.map(([name, ua]) => h('option', { value: ua }, name || t('preview.browser'))),
    );
    const form = h('form', { class: 'toolbar preview-form' }, apps, custom, h('button', { type: 'submit', class: 'ghost' }, t('preview.show')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      show(custom.value.trim());
    });
    return h('section', { class: 'card', id: 'preview' }, h('h2', {}, t('preview.title')), h('p', {}, t('preview.intro')), form, out);
  }

  // ---- nodes ----------------------------------------------------------------------------

  function nodeState(n) {
    if (!n.enrolled) return h('span', { class: 'badge not_started' }, t('nodes.waiting'));
    if (n.limited) return h('span', { class: 'badge over_quota' }, t('nodes.limited'));
    const state = n.online ? h('span', { class: 'badge active' }, t('nodes.online')) : h('span', { class: 'badge expired' }, t('nodes.offline'));
    return n.allow_unverified && n.tls === 'self_signed' ? [state, ' ', h('span', { class: 'badge unverified' }, t('nodes.unverified'))] : state;
  }

  async function nodesView() {
    const [list, groups] = await Promise.all([api('GET', 'nodes'), api('GET', 'groups')]);
    shell(
      'nodes',
      h('div', { class: 'title' }, h('h1', {}, t('nav.nodes')), h('button', { type: 'button', id: 'new-node', onclick: () => nodeDialog(groups.groups) }, t('nodes.new'))),
      list.nodes.length
        ? h(
            'table',
            { class: 'list' },
            h('thead', {}, h('tr', {}, ['nodes.name', 'nodes.state', 'nodes.address', 'nav.users', 'traffic.today', 'nodes.version', 'nodes.last_seen'].map((k) => h('th', {}, t(k))))),
            h(
              'tbody',
              {},
              list.nodes.map((n) =>
                h(
                  'tr',
                  {},
                  h('td', { 'data-label': t('nodes.name') }, h('a', { href: `#/nodes/${n.id}` }, n.name)),
                  h('td', { 'data-label': t('nodes.state') }, nodeState(n)),
                  h('td', { 'data-label': t('nodes.address') }, `${n.host}:${n.port}`),
                  h('td', { 'data-label': t('nav.users') }, number(n.users)),
                  h('td', { 'data-label': t('traffic.today') }, bytes(n.traffic_today)),
                  h('td', { 'data-label': t('nodes.version') }, n.version || '—'),
                  h('td', { 'data-label': t('nodes.last_seen') }, ago(n.last_seen)),
                ),
              ),
            ),
          )
        : h('p', { class: 'empty' }, t('nodes.none')),
    );
  }

  function nodeFields(groups, node) {
    return [
      field(t('nodes.host'), h('input', { name: 'host', required: true, value: node?.host, placeholder: 'vpn.example.net' }), t('nodes.host_hint')),
      field(t('nodes.port'), h('input', { name: 'port', type: 'number', min: 1, max: 65535, required: true, value: node?.port ?? 443, inputmode: 'numeric' })),
      field(t('nodes.hop'), h('input', { name: 'hop', value: node?.hop, placeholder: '20000-30000' }), t('nodes.hop_hint')),
      field(t('nodes.sni'), h('input', { name: 'sni', value: node?.sni }), t('nodes.sni_hint')),
      field(t('nodes.domain'), h('input', { name: 'domain', value: node?.domain, placeholder: 'node1.example.net', autocomplete: 'off' }), t('nodes.domain_hint')),
      field(
        t('nodes.tls'),
        h('select', { name: 'tls' }, ['self_signed', 'operator'].map((v) => h('option', { value: v, selected: (node?.tls || 'self_signed') === v }, t(`nodes.tls.${v}`)))),
      ),
      field(t('nodes.obfs'), h('input', { name: 'obfs', autocomplete: 'off' }), node?.obfs ? t('nodes.obfs_set') : t('nodes.obfs_hint')),
      field(t('nodes.masquerade'), h('input', { name: 'masquerade', type: 'url', value: node?.masquerade, placeholder: 'https://example.net/' }), t('nodes.masquerade_hint')),
      h(
        'div',
        { class: 'field unverified-field' },
        h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'allow_unverified', checked: !!node?.allow_unverified, 'aria-describedby': 'allow-unverified-hint' }), t('nodes.allow_unverified')),
        h('small', { class: 'unverified', id: 'allow-unverified-hint' }, t('nodes.allow_unverified_hint')),
      ),
      h(
        'fieldset',
        { class: 'fair' },
        h('legend', {}, t('nodes.traffic')),
        field(t('nodes.multiplier'), h('input', { name: 'multiplier', type: 'number', min: 0.001, max: 100, step: 'any', inputmode: 'decimal', value: String(node?.multiplier ?? 1) }), t('nodes.multiplier_hint')),
        field(t('nodes.quota_gib'), h('input', { name: 'node_quota', type: 'number', min: 0, step: 'any', inputmode: 'decimal', value: node?.quota ? String(node.quota / 2 ** 30) : '' }), t('nodes.quota_hint')),
        field(t('nodes.quota_day'), h('input', { name: 'quota_day', type: 'number', min: 1, max: 28, step: 1, inputmode: 'numeric', value: String(node?.quota_day ?? 1) })),
      ),
      groups.length
        ? h(
            'fieldset',
            { class: 'groups' },
            h('legend', {}, t('users.groups')),
            groups.map((g) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: `group:${g.name}`, checked: node ? node.groups.includes(g.name) : g.name === 'default' }), g.name)),
          )
        : null,
    ];
  }

  function nodeInput(values, groups, node) {
    const input = { host: values.host, port: Number(values.port), tls: values.tls };
    if (values.name !== undefined) input.name = values.name;
    if (values.hop || node?.hop) input.hop = values.hop;
    if (values.sni || node?.sni) input.sni = values.sni;
    if (values.obfs) input.obfs = values.obfs;
    if (values.masquerade || node?.masquerade) input.masquerade = values.masquerade;
    if (!!values.allow_unverified !== !!node?.allow_unverified) input.allow_unverified = !!values.allow_unverified;
    if ((values.domain || '') !== (node?.domain || '')) input.domain = values.domain;
    if (groups.length) input.groups = groups.filter((g) => values[`group:${g.name}`]).map((g) => g.name);
    input.multiplier = values.multiplier ? Number(values.multiplier) : 1;
    input.quota = values.node_quota ? Math.round(Number(values.node_quota) * 2 ** 30) : 0;
    input.quota_day = values.quota_day ? Number(values.quota_day) : 1;
    return input;
  }

  /** A command to copy, in a block that scrolls and takes the keyboard's focus. */
  const commandBlock = (text) => h('pre', { class: 'command', tabindex: 0, 'aria-label': t('releases.command') }, text);

  /** Whether a release is in force (new nodes install it): one not expired whose rollout did
   * not fail or stop, as control counts it. */
  const inForce = (releases) => releases.some((r) => r.expires * 1000 > Date.now() && !(r.rollout && ['failed', 'stopped'].includes(r.rollout.state)));

  /** The way forward when no release is in force, from what `GET releases` said was shipped:
   * publish the hearth-node that came with control in one click (an admin, with the release
   * key on this server), or the exact commands to run where the binary or the key is.
   * `published()` runs once the click published it. */
  function shipOffer(shipped, published) {
    const { version } = shipped;
    const arches = shipped.binaries.map((b) => b.arch).join(', ');
    if (!shipped.binaries.length) {
      return h('div', { class: 'ship', id: 'ship' }, h('p', {}, t('ship.none')), commandBlock(`sh deploy/build-release.sh\nhearth-control release sign --version ${version} target/dist/hearth-node`));
    }
    if (!shipped.key_here) {
      return h(
        'div',
        { class: 'ship', id: 'ship' },
        h('p', {}, t('ship.key_offline', { version, arches })),
        commandBlock(`hearth-control release sign --key release.key --version ${version} --out release-${version} hearth-node\nhearth-control release add release-${version}`),
      );
    }
    if (!can('admin')) return h('div', { class: 'ship', id: 'ship' }, h('p', {}, t('ship.ask_admin', { version, arches })));
    const box = h(
      'div',
      { class: 'ship', id: 'ship' },
      h('p', {}, t('ship.offer', { version, arches })),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'button', id: 'ship-publish', onclick: () => submitting(box, async () => { await api('POST', 'releases/shipped'); await published(); }) }, t('ship.publish', { version }))),
    );
    return box;
  }

  /** The one-line install (when a release is in force) and the enrollment command to copy;
   * `replaced`: an older one was still valid and no longer works. */
  function enrollCommand(answer, replaced) {
    const when = dateTime(answer.enroll_expires);
    return h(
      'div',
      { class: 'enroll', id: 'enroll' },
      replaced ? h('p', { class: 'notice', id: 'enroll-replaced' }, t('nodes.enroll_replaced')) : null,
      answer.domain ? h('p', { class: 'notice', id: 'enroll-domain' }, t('nodes.domain_needs', { domain: answer.domain, port: answer.port })) : null,
      answer.install_command
        ? [
            h('p', {}, t('nodes.install_hint', { when })),
            h('div', { id: 'install' }, secretBox(answer.install_command)),
            h('details', {}, h('summary', {}, t('nodes.by_hand')), h('p', {}, t('nodes.enroll_hint', { when })), secretBox(answer.enroll_command)),
          ]
        : [h('p', { id: 'no-release' }, t('nodes.no_release')), h('p', {}, t('nodes.enroll_hint', { when })), secretBox(answer.enroll_command)],
    );
  }

  function nodeDialog(groups) {
    const form = h(
      'form',
      { id: 'node-form' },
      field(t('nodes.name'), h('input', { name: 'name', required: true, autofocus: true })),
      nodeFields(groups),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('nodes.add'))),
    );
    const d = dialog(t('nodes.new'), form);
    onSubmit(form, async () => {
      const node = await api('POST', 'nodes', nodeInput(fields(form), groups));
      const done = h('div', { class: 'actions' }, h('button', { type: 'button', onclick: () => { d.close(); go(`nodes/${node.id}`); } }, t('done')));
      form.replaceChildren(enrollCommand(node), done);
      if (node.install_command) return;
      // No release in force: the way forward, then, once published, the one-line install
      // with a fresh token (the one above was never used).
      const { shipped } = await api('GET', 'releases');
      document.getElementById('no-release').after(
        shipOffer(shipped, async () => {
          const answer = await api('POST', `nodes/${node.id}/enroll-token`);
          form.replaceChildren(enrollCommand({ ...node, ...answer }), done);
          form.querySelector('#install button')?.focus();
        }),
      );
    });
  }

  /** A node's public certificate: for which domain, until when, whether apps check it, and
   * the last renewal error. */
  function publicCertificate(node) {
    const acme = node.acme || {};
    return [
      h('bdi', { dir: 'ltr' }, node.domain),
      ': ',
      acme.expires ? t('nodes.cert_until', { when: date(acme.expires) }) : t('nodes.public_none'),
      ' · ',
      acme.public ? t('nodes.public_in_use') : t('nodes.public_pinned'),
      acme.error ? h('div', { class: 'error', role: 'note' }, t('nodes.renew_error', { when: ago(acme.error_at), error: acme.error })) : null,
    ];
  }

  async function nodeView(id, path) {
    const [node, groups, traffic] = await Promise.all([api('GET', `nodes/${id}`), api('GET', 'groups'), api('GET', `nodes/${id}/usage?days=30`)]);
    const enrollBox = h('div', {});
    const newEnroll = h('button', {
      type: 'button',
      class: 'ghost',
      onclick: async () => {
        const box = document.getElementById('node-actions-error');
        box.hidden = true;
        try {
          const answer = await api('POST', `nodes/${id}/enroll-token`);
          enrollBox.replaceChildren(enrollCommand(answer, answer.replaced));
        } catch (err) {
          box.textContent = err.message;
          box.hidden = false;
        }
      },
    }, node.enrolled ? t('nodes.reenroll') : t('nodes.new_command'));
    const remove = h('button', {
      type: 'button',
      class: 'danger',
      onclick: async () => {
        if (!(await confirmAction(t('nodes.delete_confirm', { name: node.name }), t('delete')))) return;
        try {
          await api('DELETE', `nodes/${id}`);
          go('nodes');
        } catch (err) {
          const box = document.getElementById('node-actions-error');
          box.textContent = err.message;
          box.hidden = false;
        }
      },
    }, t('delete'));
    const edit = h(
      'form',
      { class: 'card', id: 'node-edit' },
      h('h2', {}, t('nodes.settings')),
      field(t('nodes.name'), h('input', { name: 'name', required: true, value: node.name })),
      nodeFields(groups.groups, node),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('save'))),
    );
    const drawn = nodeInput(fields(edit), groups.groups, node);
    onSubmit(edit, async () => {
      await api('PATCH', `nodes/${id}`, changedOnly(nodeInput(fields(edit), groups.groups, node), drawn));
      flash = t('saved_node');
      route();
    });
    shell(
      path,
      h('p', { class: 'crumbs' }, h('a', { href: '#/nodes' }, t('nav.nodes'))),
      h('div', { class: 'title' }, h('h1', {}, node.name), nodeState(node)),
      node.allow_unverified && node.tls === 'self_signed' ? h('p', { class: 'unverified card', id: 'node-unverified', role: 'note' }, t('nodes.unverified_on')) : null,
      h(
        'section',
        { class: 'card' },
        h(
          'dl',
          {},
          h('dt', {}, t('nodes.address')),
          h('dd', {}, `${node.host}:${node.port}`, node.hop ? ` (${node.hop})` : ''),
          h('dt', {}, t('nodes.version')),
          h('dd', {}, node.version || '—'),
          h('dt', {}, t('nodes.last_seen')),
          h('dd', {}, ago(node.last_seen)),
          h('dt', {}, t('nav.users')),
          h('dd', {}, number(node.users)),
          h('dt', {}, t('traffic.today')),
          h('dd', {}, bytes(node.traffic_today)),
          h('dt', {}, t('nodes.multiplier')),
          h('dd', {}, `×${number(node.multiplier)}`),
          h('dt', {}, t('nodes.quota')),
          h(
            'dd',
            { id: 'node-quota' },
            node.quota
              ? t('nodes.quota_used', { used: bytes(node.quota_used), quota: bytes(node.quota), when: date(node.quota_resets) })
              : t('speed.unlimited'),
            node.limited ? h('div', {}, t('nodes.limited_until', { when: date(node.quota_resets) })) : null,
          ),
          h('dt', {}, t('nodes.key')),
          h('dd', {}, node.key_id || t('nodes.waiting')),
          node.domain ? [h('dt', {}, t('nodes.public_cert')), h('dd', { id: 'node-public-cert' }, publicCertificate(node))] : null,
          h('dt', {}, t('nodes.certificate')),
          h(
            'dd',
            { id: 'node-certificate' },
            node.cert_sha256 ? [h('code', { dir: 'ltr' }, `SHA-256 ${node.cert_sha256.slice(0, 16)}…`), ' ', node.cert_expires ? t('nodes.cert_until', { when: date(node.cert_expires) }) : ''] : t('nodes.cert_none'),
          ),
          h('dt', {}, t('users.groups')),
          h('dd', {}, node.groups.join(', ') || '—'),
        ),
        h('p', { class: 'error', id: 'node-actions-error', role: 'alert', hidden: true }),
        h('div', { class: 'actions wrap' }, newEnroll, remove),
        enrollBox,
      ),
      trafficCard(traffic.days),
      edit,
    );
  }

  // ---- groups, tokens, audit ------------------------------------------------------------

  async function groupsView() {
    const [list, routing] = await Promise.all([api('GET', 'groups'), me.role === 'owner' ? api('GET', 'routing') : null]);
    const sets = routing && routing.rule_sets;
    const ruleSet = (g) => (sets ? ruleSetField(sets, g && g.rule_set, 'routing.none', 'routing.rule_set_hint_group') : null);
    const form = h(
      'form',
      { class: 'card', id: 'group-form' },
      h('h2', {}, t('groups.new')),
      field(t('groups.name'), h('input', { name: 'name', required: true })),
      field(t('users.note'), h('input', { name: 'note', maxlength: 255 })),
      speedFields(null, 'cut', 0, false),
      fairFields(null),
      ruleSet(null),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('groups.create'))),
    );
    onSubmit(form, async () => {
      const values = fields(form);
      const routed = values.rule_set ? { rule_set: values.rule_set } : {};
      await api('POST', 'groups', { name: values.name, note: values.note, ...speedInput(values, false), ...fairInput(values), ...routed });
      route();
    });
    const editGroup = (g) => {
      const edit = h(
        'form',
        { id: 'group-edit' },
        field(t('groups.name'), h('input', { name: 'name', required: true, value: g.name })),
        field(t('users.note'), h('input', { name: 'note', maxlength: 255, value: g.note })),
        speedFields(g.speed_limit, g.on_quota, g.slow_speed, false),
        fairFields(g),
        ruleSet(g),
        errorBox(),
        h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('save'))),
      );
      const d = dialog(t('groups.edit', { name: g.name }), edit);
      const groupInput = () => {
        const values = fields(edit);
        const input = { name: values.name, note: values.note, ...speedInput(values, false), ...fairInput(values) };
        if ('rule_set' in values) input.rule_set = values.rule_set;
        return input;
      };
      const drawn = groupInput();
      onSubmit(edit, async () => {
        await api('PATCH', `groups/${g.id}`, changedOnly(groupInput(), drawn));
        d.close();
        flash = t('saved_group');
        route();
      });
    };
    const remove = (g) => deleteButton(t('delete'), t('groups.delete_confirm', { name: g.name }), `groups/${g.id}`);
    shell(
      'groups',
      h('h1', {}, t('nav.groups')),
      h('p', {}, t('groups.intro')),
      h(
        'table',
        { class: 'list' },
        h(
          'thead',
          {},
          h('tr', {}, ['groups.name', 'nav.users', 'nav.nodes', 'speed.title', 'devices.title', sets ? 'routing.rule_set' : null, 'users.note', ''].filter((k) => k !== null).map((k) => h('th', {}, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions'))))),
        ),
        h(
          'tbody',
          {},
          list.groups.map((g) =>
            h(
              'tr',
              {},
              h('td', { 'data-label': t('groups.name') }, h('a', { href: `#/users?group=${encodeURIComponent(g.name)}` }, g.name)),
              h('td', { 'data-label': t('nav.users') }, number(g.users)),
              h('td', { 'data-label': t('nav.nodes') }, number(g.nodes)),
              h('td', { 'data-label': t('speed.title') }, speedText(g.speed_limit, t('speed.unlimited')), g.on_quota === 'slow' ? h('small', {}, ` · ${t('speed.slowed_to', { n: number(g.slow_speed) })}`) : null),
              h(
                'td',
                { 'data-label': t('devices.title') },
                g.device_limit ? t('devices.at_most', { n: number(g.device_limit) }) : t('speed.unlimited'),
                g.block_torrent || g.block_smtp
                  ? h('small', {}, ` · ${[g.block_torrent ? t('guard.torrent_short') : null, g.block_smtp ? t('guard.smtp_short') : null].filter(Boolean).join(', ')}`)
                  : null,
              ),
              sets ? h('td', { 'data-label': t('routing.rule_set') }, g.rule_set || '—') : null,
              h('td', { 'data-label': t('users.note') }, g.note),
              h('td', {}, h('button', { type: 'button', class: 'ghost small', 'data-edit-group': g.name, onclick: () => editGroup(g) }, t('groups.edit_short')), ' ', remove(g)),
            ),
          ),
        ),
      ),
      form,
    );
  }

  /** A small button that deletes `path` after the person confirms, then shows the page again. */
  function deleteButton(label, question, path, attrs) {
    return h('button', {
      type: 'button',
      class: 'ghost small',
      ...attrs,
      onclick: async () => {
        if (!(await confirmAction(question, label))) return;
        try {
          await api('DELETE', path);
          route();
        } catch (err) {
          alertError(err);
        }
      },
    }, label);
  }

  function alertError(err) {
    const d = dialog(t('error'), h('div', {}, h('p', { class: 'error', role: 'alert' }, err.message)));
    return d;
  }

  async function tokensView() {
    const list = await api('GET', 'tokens');
    const form = h(
      'form',
      { class: 'card', id: 'token-form' },
      h('h2', {}, t('tokens.new')),
      field(t('tokens.name'), h('input', { name: 'name', required: true })),
      field(t('tokens.scope'), h('select', { name: 'scope' }, SCOPES.filter((s) => SCOPES.indexOf(s) <= SCOPES.indexOf(me.scope)).map((s) => h('option', { value: s }, t(`scope.${s}`))))),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('tokens.create'))),
    );
    onSubmit(form, async () => {
      const token = await api('POST', 'tokens', fields(form));
      const d = dialog(t('tokens.created'), h('div', { id: 'new-token' }, h('p', {}, t('tokens.once')), secretBox(token.token)));
      d.addEventListener('close', () => route());
    });
    const revoke = (tok) =>
      deleteButton(t('tokens.revoke'), t('tokens.revoke_confirm', { name: tok.name }), `tokens/${tok.id}`, { 'data-token': tok.name });
    shell(
      'tokens',
      h('h1', {}, t('nav.tokens')),
      h('p', {}, t('tokens.intro')),
      list.tokens.length
        ? h(
            'table',
            { class: 'list', id: 'tokens' },
            h('thead', {}, h('tr', {}, ['tokens.name', me.role === 'owner' ? 'admins.admin' : null, 'tokens.scope', 'tokens.last_used', ''].filter((k) => k !== null).map((k) => h('th', {}, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions')))))),
            h(
              'tbody',
              {},
              list.tokens.map((tok) =>
                h(
                  'tr',
                  {},
                  h('td', { 'data-label': t('tokens.name') }, tok.name),
                  me.role === 'owner' ? h('td', { 'data-label': t('admins.admin') }, tok.admin === 'owner' ? t('role.owner') : tok.admin) : null,
                  h('td', { 'data-label': t('tokens.scope') }, t(`scope.${tok.scope}`)),
                  h('td', { 'data-label': t('tokens.last_used') }, ago(tok.last_used)),
                  h('td', {}, revoke(tok)),
                ),
              ),
            ),
          )
        : h('p', { class: 'empty' }, t('tokens.none')),
      form,
    );
  }

  /** The kinds of events a webhook can take, by group. */
  const EVENT_GROUPS = ['*', 'user.*', 'node.*', 'edge.*', 'signin.*', 'key.*', 'release.*'];

  /** Settings, Notifications: webhooks (each delivery's state and answer, a test event) and
   * the latest events. */
  async function notificationsView() {
    const [{ webhooks }, { events }, { telegram }] = await Promise.all([api('GET', 'webhooks'), api('GET', 'events?limit=20'), api('GET', 'telegram')]);
    const eventBoxes = (name, chosen) =>
      h(
        'fieldset',
        { class: 'events' },
        h('legend', {}, t('notify.events')),
        EVENT_GROUPS.map((group) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name, value: group, checked: chosen.includes(group) }), ' ', t(`notify.group.${group}`))),
      );
    const form = h(
      'form',
      { class: 'card', id: 'webhook-form' },
      h('h2', {}, t('notify.add')),
      field(t('notify.url'), h('input', { name: 'url', type: 'url', required: true, maxlength: 512, placeholder: 'https://bot.example.com/hearth' })),
      eventBoxes('events', ['*']),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('notify.add_button'))),
    );
    onSubmit(form, async () => {
      const chosen = [...form.querySelectorAll('[name=events]:checked')].map((box) => box.value);
      const made = await api('POST', 'webhooks', { url: form.querySelector('[name=url]').value.trim(), events: chosen });
      const d = dialog(t('notify.secret_title'), h('div', { id: 'new-webhook' }, h('p', {}, t('notify.secret_once')), secretBox(made.secret)));
      d.addEventListener('close', () => route());
    });
    // The owner's Telegram bot: checked by Telegram when saved; the token never comes back.
    const bot = h(
      'form',
      { class: 'card', id: 'telegram-form' },
      h('h2', {}, t('tg.title')),
      h('p', { id: 'telegram-state' }, telegram ? t('tg.connected', { bot: `@${telegram.bot_name}`, chat: telegram.chat_id }) : t('tg.intro')),
      field(t('tg.token'), h('input', { name: 'token', type: 'password', autocomplete: 'off', required: true, maxlength: 128 }), t('tg.token_hint')),
      field(t('tg.chat'), h('input', { name: 'chat_id', type: 'number', required: true, step: 1, value: telegram ? telegram.chat_id : '' }), t('tg.chat_hint')),
      field(t('tg.lang'), h('select', { name: 'lang' }, [['en', 'English'], ['ru', 'Русский'], ['fa', 'فارسی'], ['zh', '中文']].map(([value, label]) => h('option', { value, selected: (telegram ? telegram.lang : lang) === value }, label)))),
      eventBoxes('tg-events', telegram ? telegram.events : ['*']),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'tell_users', checked: telegram ? telegram.tell_users : false }), ' ', t('tg.tell_users')),
      errorBox(),
      h(
        'div',
        { class: 'actions' },
        h('button', { type: 'submit' }, t('tg.save')),
        telegram ? deleteButton(t('tg.remove'), t('tg.remove_confirm'), 'telegram', { id: 'telegram-remove' }) : null,
      ),
    );
    onSubmit(bot, async () => {
      await api('PUT', 'telegram', {
        token: bot.querySelector('[name=token]').value.trim(),
        chat_id: Number(bot.querySelector('[name=chat_id]').value),
        lang: bot.querySelector('[name=lang]').value,
        events: [...bot.querySelectorAll('[name=tg-events]:checked')].map((box) => box.value),
        tell_users: bot.querySelector('[name=tell_users]').checked,
      });
      route();
    });
    const deliveries = h('section', { class: 'card', id: 'deliveries', hidden: true });
    const showDeliveries = async (hook) => {
      try {
        const list = await api('GET', `webhooks/${hook.id}/deliveries?limit=50`);
        deliveries.hidden = false;
        deliveries.replaceChildren(
          h('h2', { tabindex: '-1' }, t('notify.deliveries_of', { url: hook.url })),
          list.deliveries.length
            ? h(
                'table',
                { class: 'list' },
                h('thead', {}, h('tr', {}, ['notify.event', 'notify.state', 'notify.attempts', 'notify.answer'].map((k) => h('th', {}, t(k))))),
                h(
                  'tbody',
                  {},
                  list.deliveries.map((d) =>
                    h(
                      'tr',
                      {},
                      h('td', { 'data-label': t('notify.event'), title: d.kind }, eventWords(d.kind, d.data, d.subject), h('br'), h('small', {}, ago(d.queued))),
                      h('td', { 'data-label': t('notify.state') }, h('span', { class: `badge ${d.state === 'delivered' ? 'active' : d.state === 'failed' ? 'disabled' : 'not_started'}` }, t(`notify.state.${d.state}`))),
                      h('td', { 'data-label': t('notify.attempts') }, String(d.attempts)),
                      h('td', { 'data-label': t('notify.answer') }, d.status ? `${d.status} ` : '', h('code', {}, d.answer)),
                    ),
                  ),
                ),
              )
            : h('p', { class: 'empty' }, t('notify.no_deliveries')),
        );
        deliveries.querySelector('h2').focus();
      } catch (err) {
        alertError(err);
      }
    };
    const test = async (hook) => {
      try {
        const { event } = await api('POST', `webhooks/${hook.id}/test`);
        // The deliverer runs every second: show the delivery once it has been tried (or after
        // ten seconds, still waiting).
        for (let tries = 0; tries < 10; tries += 1) {
          await new Promise((done) => setTimeout(done, 1000));
          const list = await api('GET', `webhooks/${hook.id}/deliveries?limit=50`);
          const sent = list.deliveries.find((d) => d.event === event);
          if (sent && (sent.attempts > 0 || sent.state !== 'pending')) break;
        }
        await showDeliveries(hook);
      } catch (err) {
        alertError(err);
      }
    };
    const hooks = webhooks.length
      ? h(
          'table',
          { class: 'list', id: 'webhooks' },
          h('thead', {}, h('tr', {}, ['notify.url', 'notify.events', 'notify.counts', ''].map((k) => h('th', {}, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions')))))),
          h(
            'tbody',
            {},
            webhooks.map((hook) =>
              h(
                'tr',
                {},
                h('td', { 'data-label': t('notify.url') }, h('code', {}, hook.url)),
                h('td', { 'data-label': t('notify.events') }, hook.events.map((g) => (STRINGS.en[`notify.group.${g}`] ? t(`notify.group.${g}`) : g)).join('; ')),
                h('td', { 'data-label': t('notify.counts') }, t('notify.counted', { delivered: number(hook.delivered), pending: number(hook.pending), failed: number(hook.failed) })),
                h(
                  'td',
                  {},
                  h(
                    'span',
                    { class: 'inline' },
                    h('button', { type: 'button', class: 'ghost small', 'data-deliveries': hook.id, onclick: () => showDeliveries(hook) }, t('notify.show_deliveries')),
                    h('button', { type: 'button', class: 'ghost small', 'data-test': hook.id, onclick: () => test(hook) }, t('notify.test')),
                    deleteButton(t('delete'), t('notify.delete_confirm', { url: hook.url }), `webhooks/${hook.id}`, { 'data-delete': hook.id }),
                  ),
                ),
              ),
            ),
          ),
        )
      : h('p', { class: 'empty' }, t('notify.none'));
    shell(
      'settings/notifications',
      h('p', {}, h('a', { href: '#/settings' }, t('notify.back'))),
      h('h1', {}, t('notify.title')),
      h('p', {}, t('notify.intro')),
      h('section', { class: 'card' }, h('h2', {}, t('notify.webhooks')), hooks),
      deliveries,
      form,
      bot,
      h(
        'section',
        { class: 'card', id: 'events' },
        h('h2', {}, t('notify.recent')),
        events.length
          ? h('ul', {}, events.map((e) => h('li', { title: e.kind }, eventWords(e.kind, e.data, e.subject), ' ', h('small', {}, ago(e.at)))))
          : h('p', { class: 'empty' }, t('notify.no_events')),
      ),
    );
  }

  /** Signed node releases: roll one out (a canary node first), follow it, stop it. */
  async function releasesView() {
    const [list, nodes] = await Promise.all([api('GET', 'releases'), api('GET', 'nodes')]);
    const enrolled = nodes.nodes.filter((n) => n.enrolled);
    const running = list.releases.some((r) => r.rollout && ['canary', 'rolling'].includes(r.rollout.state));
    const post = async (path, body) => {
      try {
        await api('POST', path, body);
        route();
      } catch (err) {
        alertError(err);
      }
    };
    const actions = (r) => {
      const state = r.rollout && r.rollout.state;
      if (state === 'canary' || state === 'rolling') {
        return h('button', { type: 'button', class: 'ghost small', 'data-stop': r.version, onclick: () => post(`releases/${r.version}/stop`) }, t('releases.stop'));
      }
      if (running || !enrolled.length || r.expires * 1000 < Date.now()) return '';
      const canary = h('select', { 'aria-label': t('releases.canary'), 'data-canary': r.version }, enrolled.map((n) => h('option', { value: n.id }, n.name)));
      return h(
        'span',
        { class: 'inline' },
        canary,
        h('button', { type: 'button', class: 'small', 'data-rollout': r.version, onclick: () => post(`releases/${r.version}/rollout`, { canary: Number(canary.value) }) }, t('releases.rollout')),
      );
    };
    const progress = (r) => {
      if (!r.rollout) return t('releases.not_rolled');
      const o = r.rollout;
      const parts = [t(`releases.state.${o.state}`), t('releases.progress', { done: o.done.length, total: enrolled.length })];
      if (o.detail) parts.push(o.detail);
      return h('span', { class: `rollout ${o.state}` }, parts.join(' · '));
    };
    shell(
      'releases',
      h('h1', {}, t('nav.releases')),
      h('p', {}, t('releases.intro')),
      inForce(list.releases) ? commandBlock('hearth-control release sign --version 0.2.0 target/release/hearth-node') : shipOffer(list.shipped, async () => route()),
      list.releases.length
        ? h(
            'table',
            { class: 'list', id: 'releases' },
            h('thead', {}, h('tr', {}, ['releases.version', 'releases.built', 'releases.expires', 'releases.rollout_state', ''].map((k) => h('th', {}, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions')))))),
            h(
              'tbody',
              {},
              list.releases.map((r) =>
                h(
                  'tr',
                  { 'data-release': r.version },
                  h('td', { 'data-label': t('releases.version') }, h('strong', {}, r.name), h('br'), h('small', {}, r.files.join(', '))),
                  h('td', { 'data-label': t('releases.built') }, dateTime(r.built)),
                  h('td', { 'data-label': t('releases.expires') }, date(r.expires)),
                  h('td', { 'data-label': t('releases.rollout_state') }, progress(r)),
                  h('td', {}, actions(r)),
                ),
              ),
            ),
          )
        : h('p', { class: 'empty' }, t('releases.none')),
    );
  }

  // ---- in words -------------------------------------------------------------------------

  /** What each field an edit changes is called, and how its values read. */
  const FIELDS = {
    name: ['users.name'],
    quota: ['field.quota', 'bytes'],
    expires_at: ['users.expires', 'date'],
    duration_days: ['field.duration_days', 'number'],
    reset: ['users.reset', 'reset'],
    note: ['users.note'],
    enabled: ['field.enabled', 'yes'],
    disabled: ['field.enabled', 'yes'],
    speed_limit: ['speed.title', 'speed'],
    on_quota: ['speed.on_quota', 'on_quota'],
    slow_speed: ['speed.slow', 'number'],
    device_limit: ['devices.limit', 'number'],
    groups: ['users.groups'],
    host: ['nodes.host'],
    port: ['nodes.port'],
    hop: ['nodes.hop'],
    sni: ['nodes.sni'],
    tls: ['nodes.tls', 'tls'],
    obfs: ['nodes.obfs', 'yes'],
    masquerade: ['nodes.masquerade'],
    multiplier: ['nodes.multiplier', 'number'],
    quota_day: ['nodes.quota_day', 'number'],
    allow_unverified: ['nodes.allow_unverified', 'yes'],
    domain: ['nodes.domain'],
    block_torrent: ['guard.torrent', 'yes'],
    block_smtp: ['guard.smtp', 'yes'],
    role: ['admins.role', 'role'],
    password: ['password'],
    rule_set: ['routing.rule_set'],
  };

  /** A field's name in the admin's language (the key itself for one the panel does not know). */
  const fieldName = (field) => (FIELDS[field] ? t(FIELDS[field][0]) : field);

  /** A changed field's value, read as the panel shows it elsewhere. */
  function fieldValue(field, value) {
    if (value === null || value === undefined || value === '') return '—';
    const kind = FIELDS[field]?.[1];
    if (Array.isArray(value)) return value.length ? value.join(', ') : '—';
    if (kind === 'bytes') return value ? bytes(value) : t('users.unlimited');
    if (kind === 'date') return date(value);
    if (kind === 'yes' || typeof value === 'boolean') return t(value ? 'field.yes' : 'field.no');
    if (kind === 'reset') return STRINGS.en[`reset.${value}`] ? t(`reset.${value}`) : value;
    if (kind === 'on_quota') return t(`speed.on_quota_${value}`);
    if (kind === 'role') return t(`role.${value}`);
    if (kind === 'tls') return STRINGS.en[`nodes.tls.${value.replace('-', '_')}`] ? t(`nodes.tls.${value.replace('-', '_')}`) : value;
    if (kind === 'speed' && typeof value === 'object') {
      const one = (n) => (n ? t('speed.mbps', { n: number(n) }) : t('speed.unlimited'));
      return t('speed.down_up', { down: one(value.down), up: one(value.up) });
    }
    if (typeof value === 'number') return number(value);
    if (typeof value === 'object') return JSON.stringify(value);
    return whole(String(value));
  }

  /** An edit's changes in words: "Traffic quota: 1 GiB → 2 GiB · Note". */
  const changesWords = (changes) =>
    changes.map((c) => ('from' in c ? `${fieldName(c.field)}: ${fieldValue(c.field, c.from)} → ${fieldValue(c.field, c.to)}` : fieldName(c.field))).join(' · ');

  /** Who did something, as the audit log names them (`owner`, `admin bob`, `token 3 (backup)
   * of admin bob`, `cli`...), in words. */
  function actorWords(actor) {
    if (!actor) return '—';
    const token = actor.match(/^token \d+ \((.*)\)(?: of (.*))?$/);
    if (token) return token[2] ? t('audit.actor.token_of', { name: token[1], admin: actorWords(token[2]) }) : t('audit.actor.token', { name: token[1] });
    const admin = actor.match(/^admin (.+)$/);
    if (admin) return admin[1];
    return STRINGS.en[`audit.actor.${actor}`] ? t(`audit.actor.${actor}`) : actor;
  }

  /** What an entry is about: a user, node or group links to its page, by its name. */
  function targetWords(target) {
    const m = target.match(/^(user|node|group|token) (\d+)(?: \((.*)\))?$/);
    if (!m) return target;
    const [, kind, id, name] = m;
    const label = name || `${kind} ${id}`;
    if (kind === 'token') return label;
    return kind === 'group' ? h('a', { href: '#/groups' }, label) : h('a', { href: `#/${kind}s/${id}` }, label);
  }

  /** A browser's User-Agent in a few words ("Firefox on Linux"); the whole of it on hover. */
  function agentWords(agent) {
    if (!agent) return '—';
    const browsers = [
      [/Edg\//, 'Edge'],
      [/OPR\/|Opera/, 'Opera'],
      [/YaBrowser/, 'Yandex Browser'],
      [/Firefox\//, 'Firefox'],
      [/Chrome\/|CriOS/, 'Chrome'],
      [/Safari\//, 'Safari'],
      [/^curl\//, 'curl'],
    ];
    const systems = [
      [/Android/, 'Android'],
      [/iPhone|iPad|iPod/, 'iOS'],
      [/Windows/, 'Windows'],
      [/Mac OS X|Macintosh/, 'macOS'],
      [/CrOS/, 'ChromeOS'],
      [/Linux/, 'Linux'],
    ];
    const browser = browsers.find(([re]) => re.test(agent))?.[1];
    const os = systems.find(([re]) => re.test(agent))?.[1];
    const words = browser && os ? t('agent.on', { browser, os }) : browser || os || agent.slice(0, 40);
    return h('span', { title: agent }, words);
  }

  /** An event (a webhook's, the Telegram bot's) in words, from its kind and data. */
  function eventWords(kind, data, subject) {
    data = data || {};
    const named = data.user?.name ?? data.node?.name ?? data.edge?.name ?? subject;
    const vars = {
      name: named,
      fields: (data.fields || []).map(fieldName).join(', '),
      percent: number(data.percent ?? 0),
      used: bytes(data.used ?? 0),
      address: data.address ?? '',
      release: data.release ?? '',
      date: data.expires ? date(data.expires) : '',
      by: actorWords(data.sent_by ?? data.by ?? ''),
    };
    return STRINGS.en[`event.${kind}`] ? t(`event.${kind}`, vars) : `${kind}: ${subject}`;
  }

  async function auditView(params) {
    const filter = new URLSearchParams();
    for (const key of ['actor', 'action', 'user']) if (params.get(key)) filter.set(key, params.get(key));
    const before = params.get('before');
    const list = await api('GET', `audit?limit=100${before ? `&before=${Number(before)}` : ''}${filter.size ? `&${filter}` : ''}`);
    const user = params.get('user') ? await api('GET', `users/${Number(params.get('user'))}`).catch(() => null) : null;
    const entries = list.entries;
    const actionWords = (action) => (STRINGS.en[`audit.action.${action}`] ? t(`audit.action.${action}`) : action);
    const pick = (name, label, any, values, words) =>
      field(
        label,
        h('select', { name }, h('option', { value: '' }, any), values.map((v) => h('option', { value: v, selected: params.get(name) === v }, words(v)))),
      );
    // The filters: who and what from what the log holds; a user by name.
    const form = h(
      'form',
      { class: 'toolbar filters', id: 'audit-filter' },
      pick('actor', t('audit.who'), t('audit.filter.anyone'), list.actors, actorWords),
      pick('action', t('audit.what'), t('audit.filter.anything'), list.actions.slice().sort((a, b) => actionWords(a).localeCompare(actionWords(b), lang)), actionWords),
      field(t('audit.filter.user'), h('input', { name: 'user_name', type: 'search', value: user ? user.name : '', autocomplete: 'off' })),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('audit.filter.apply')), filter.size ? h('a', { class: 'button ghost', href: '#/audit' }, t('audit.filter.clear')) : null),
    );
    onSubmit(form, async () => {
      const values = fields(form);
      const next = new URLSearchParams();
      if (values.actor) next.set('actor', values.actor);
      if (values.action) next.set('action', values.action);
      const wanted = (values.user_name || '').trim();
      if (wanted) {
        const found = await api('GET', `users?q=${encodeURIComponent(wanted)}&per_page=50`);
        const match = found.users.find((u) => u.name.toLowerCase() === wanted.toLowerCase());
        if (!match) throw new ApiError(0, 'no_user', t('audit.filter.no_user', { name: wanted }));
        next.set('user', match.id);
      }
      go(`audit${next.size ? `?${next}` : ''}`);
    });
    shell(
      'audit',
      h('h1', {}, t('nav.audit')),
      form,
      entries.length
        ? h(
            'table',
            { class: 'list', id: 'audit' },
            h('thead', {}, h('tr', {}, ['audit.when', 'audit.who', 'audit.what', 'audit.target', 'audit.detail'].map((k) => h('th', {}, t(k))))),
            h(
              'tbody',
              {},
              entries.map((e) =>
                h(
                  'tr',
                  { 'data-action': e.action },
                  h('td', { 'data-label': t('audit.when') }, dateTime(e.at)),
                  h('td', { 'data-label': t('audit.who'), title: e.actor }, actorWords(e.actor)),
                  // What was done in the admin's language (the code itself when strings.js has
                  // no words for it).
                  h('td', { 'data-label': t('audit.what'), title: e.action }, actionWords(e.action)),
                  h('td', { 'data-label': t('audit.target') }, targetWords(e.target)),
                  h('td', { 'data-label': t('audit.detail') }, auditDetail(e)),
                ),
              ),
            ),
          )
        : h('p', { class: 'empty' }, t(filter.size ? 'audit.none_here' : 'audit.none')),
      entries.length === 100
        ? h('nav', { class: 'pager' }, h('a', { class: 'button ghost small', href: `#/audit?before=${entries[entries.length - 1].id}${filter.size ? `&${filter}` : ''}` }, t('audit.older')))
        : null,
    );
  }

  /** An entry's detail in words: an edit's changes, a sign-in's browser, a refusal's reason. */
  function auditDetail(e) {
    if (e.changes) return changesWords(e.changes);
    if (e.action === 'signin') return agentWords(e.detail);
    if (e.action === 'signin.failed' && STRINGS.en[`audit.reason.${e.detail}`]) return t(`audit.reason.${e.detail}`);
    return e.detail;
  }

  // ---- settings -------------------------------------------------------------------------

  const RULE_TARGETS = ['base64', 'mihomo', 'sing-box', 'surge', 'loon', 'page'];

  /** The owner's User-Agent rules: an app whose User-Agent contains the text gets the format. */
  function rulesForm(settings) {
    const rows = h('div', { class: 'rules' });
    const addRow = (rule) =>
      rows.append(
        h(
          'div',
          { class: 'rule' },
          h('input', { name: 'contains', value: rule.contains, maxlength: 64, placeholder: t('rules.contains'), 'aria-label': t('rules.contains') }),
          h('select', { name: 'target', 'aria-label': t('rules.target') }, RULE_TARGETS.map((v) => h('option', { value: v, selected: rule.target === v }, t(`rules.${v}`)))),
          h('button', { type: 'button', class: 'ghost small', onclick: (e) => e.target.closest('.rule').remove() }, t('rules.remove')),
        ),
      );
    settings.ua_rules.forEach(addRow);
    const form = h(
      'form',
      { class: 'card', id: 'rules-form' },
      h('h2', {}, t('rules.title')),
      h('p', {}, t('rules.intro')),
      rows,
      errorBox(),
      h('p', { class: 'notice', role: 'status', hidden: true }),
      h(
        'div',
        { class: 'actions' },
        h('button', { type: 'button', class: 'ghost', id: 'add-rule', onclick: () => addRow({ contains: '', target: 'sing-box' }) }, t('rules.add')),
        h('button', { type: 'submit' }, t('save')),
      ),
    );
    onSubmit(form, async () => {
      const ua_rules = [...rows.querySelectorAll('.rule')]
        .map((row) => ({ contains: row.querySelector('[name=contains]').value.trim(), target: row.querySelector('[name=target]').value }))
        .filter((rule) => rule.contains);
      await api('PATCH', 'settings', { ua_rules });
      const done = form.querySelector('.notice');
      done.textContent = t('rules.saved');
      done.hidden = false;
    });
    return form;
  }

  /** Moving in from another panel: a file, a preview of what it brings, then the import; and
   * the export, in the format the import reads. */
  function importCard() {
    const out = h('div', { id: 'import-report', 'aria-live': 'polite' });
    const form = h(
      'form',
      { class: 'card', id: 'import-form' },
      h('h2', {}, t('import.title')),
      h('p', {}, t('import.intro')),
      field(
        t('import.source'),
        h(
          'select',
          { name: 'source', onchange: () => shown() },
          [
            ['3x-ui', 'import.source_3x-ui'],
            ['remnawave', 'import.source_remnawave'],
            ['marzban', 'import.source_marzban'],
            ['marzban:api', 'import.source_marzban_api'],
            ['pasarguard', 'import.source_pasarguard'],
            ['pasarguard:api', 'import.source_pasarguard_api'],
            ['hearth', 'import.source_hearth'],
          ].map(([value, key]) => h('option', { value }, t(key))),
        ),
      ),
      h('div', { class: 'import-file' }, field(t('import.file'), h('input', { name: 'file', type: 'file', required: true }))),
      h(
        'div',
        { class: 'import-api', hidden: true },
        field(t('import.url'), h('input', { name: 'url', type: 'url', placeholder: 'https://panel.example.com' })),
        field(t('import.token'), h('input', { name: 'token', type: 'password', autocomplete: 'off' }), h('span', { class: 'token-hint' }, t('import.token_hint'))),
      ),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('import.preview'))),
      out,
    );
    const report = (answer, source, file) => {
      const rows = (items, cells) => h('ul', {}, items.map((item) => h('li', {}, cells(item))));
      out.replaceChildren(
        h('p', { role: 'status' }, tn(answer.dry_run ? 'import.would' : 'import.done', answer.imported.length, { unchanged: number(answer.unchanged) })),
        // What the reader noticed about the source as a whole (a database perhaps behind).
        ...(answer.warnings || []).map((w) => h('p', { class: 'warning' }, w)),
        answer.imported.length
          ? rows(answer.imported, (u) => [
              t('import.user', { name: u.name, id: u.id, password: t(u.password_kept ? 'import.password_kept' : 'import.password_new'), aliases: number(u.aliases) }),
              // What came over changed: said per user, never silently.
              u.changed && u.changed.length ? h('ul', {}, u.changed.map((c) => h('li', {}, c))) : null,
            ])
          : null,
        answer.skipped.length ? h('h3', {}, t('import.skipped', { n: number(answer.skipped.length) })) : null,
        answer.skipped.length ? rows(answer.skipped, (s) => `${s.id}: ${s.reason}`) : null,
        answer.fields && answer.fields.length
          ? h(
              'details',
              { class: 'import-fields' },
              h('summary', {}, t('import.fields', { source: answer.source })),
              h(
                'table',
                { class: 'list' },
                h('thead', {}, h('tr', {}, ['import.field', 'import.fate', 'import.how'].map((k) => h('th', { scope: 'col' }, t(k))))),
                h('tbody', {}, answer.fields.map((f) => h('tr', {}, h('td', {}, h('code', {}, f.field)), h('td', {}, t(`import.fate.${f.fate}`)), h('td', {}, f.how)))),
              ),
            )
          : null,
        answer.dry_run && answer.imported.length
          ? h('div', { class: 'actions' }, h('button', {
              type: 'button',
              id: 'import-go',
              onclick: async (e) => {
                e.target.disabled = true;
                try {
                  report(await api('POST', `import?source=${encodeURIComponent(source)}`, file), source, file);
                } catch (err) {
                  e.target.disabled = false;
                  alertError(err);
                }
              },
            }, tn('import.go', answer.imported.length)))
          : null,
      );
    };
    // A panel read over its API takes its address and a token; the others a file. The
    // select's value is the source, with `:api` when the same panel can also be read so.
    const chosen = () => {
      const value = form.querySelector('[name=source]').value;
      return { source: value.split(':')[0], byApi: value === 'remnawave' || value.endsWith(':api') };
    };
    const shown = () => {
      const { source, byApi } = chosen();
      form.querySelector('.token-hint').textContent = t(source === 'remnawave' ? 'import.token_hint' : 'import.token_hint_marzban');
      form.querySelector('.import-file').hidden = byApi;
      form.querySelector('.import-api').hidden = !byApi;
      form.querySelector('[name=file]').required = !byApi;
      form.querySelector('[name=url]').required = byApi;
      form.querySelector('[name=token]').required = byApi;
    };
    onSubmit(form, async () => {
      const { source, byApi } = chosen();
      const body =
        byApi
          ? { url: form.querySelector('[name=url]').value.trim(), token: form.querySelector('[name=token]').value.trim() }
          : form.querySelector('[name=file]').files[0];
      report(await api('POST', `import?source=${encodeURIComponent(source)}&dry_run=true`, body), source, body);
    });
    const exportButton = h('button', {
      type: 'button',
      class: 'ghost',
      id: 'export',
      onclick: async () => {
        try {
          const document_ = await api('GET', 'export');
          const link = h('a', { href: URL.createObjectURL(new Blob([JSON.stringify(document_, null, 2)], { type: 'application/json' })), download: 'hearth-users.json' });
          link.click();
          URL.revokeObjectURL(link.href);
        } catch (err) {
          alertError(err);
        }
      },
    }, t('import.export'));
    return h('div', {}, form, h('section', { class: 'card', id: 'export-card' }, h('h2', {}, t('import.export_title')), h('p', {}, t('import.export_intro')), exportButton));
  }

  /** The owner's sessions: where and in which browser, last used; end one, or all the others. */
  /** The asker's passkeys: add one (this device, or a phone or key it offers), remove one. */
  function passkeysCard(state) {
    const form = h(
      'form',
      { class: 'inline', id: 'passkey-form' },
      h('input', { name: 'name', required: true, placeholder: t('passkeys.name'), 'aria-label': t('passkeys.name') }),
      h('button', { type: 'submit' }, t('passkeys.add')),
      errorBox(),
    );
    onSubmit(form, async () => {
      const { ticket, options } = await api('POST', 'passkeys', { name: fields(form).name });
      let credential;
      try {
        credential = await createPasskey(options);
      } catch (e) {
        throw new Error(t('passkeys.cancelled'));
      }
      await api('POST', 'passkeys/finish', { ticket, credential });
      route();
    });
    return h(
      'section',
      { class: 'card', id: 'passkeys' },
      h('h2', {}, t('passkeys.title')),
      h('p', {}, t('passkeys.intro')),
      state.passkeys.length
        ? h(
            'table',
            { class: 'list' },
            h('thead', {}, h('tr', {}, ['passkeys.name', 'passkeys.added', 'passkeys.last_used', ''].map((k) => h('th', { scope: 'col' }, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions')))))),
            h(
              'tbody',
              {},
              state.passkeys.map((p) =>
                h(
                  'tr',
                  {},
                  h('td', { 'data-label': t('passkeys.name') }, p.name),
                  h('td', { 'data-label': t('passkeys.added') }, date(p.created)),
                  h('td', { 'data-label': t('passkeys.last_used') }, ago(p.last_used)),
                  h('td', {}, deleteButton(t('passkeys.remove'), t('passkeys.remove_confirm', { name: p.name }), `passkeys/${p.id}`, { 'data-passkey': p.name })),
                ),
              ),
            ),
          )
        : h('p', { class: 'empty' }, t('passkeys.none')),
      !state.available ? h('p', { class: 'notice' }, t('passkeys.unavailable')) : passkeysHere() ? form : h('p', { class: 'notice' }, t('passkeys.no_browser')),
    );
  }

  /** Changing one's own password: the current one, then the new one twice; the other
   * sessions end. */
  function passwordCard() {
    const form = h(
      'form',
      { id: 'password-form' },
      field(t('password.current'), h('input', { name: 'current', type: 'password', autocomplete: 'current-password', required: true })),
      field(t('password.new'), h('input', { name: 'password', type: 'password', autocomplete: 'new-password', required: true, minlength: 10 }), t('setup.password_hint')),
      field(t('setup.repeat'), h('input', { name: 'repeat', type: 'password', autocomplete: 'new-password', required: true, minlength: 10 })),
      errorBox(),
      h('p', { class: 'notice', role: 'status', id: 'password-changed', hidden: true }),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('password.change'))),
    );
    onSubmit(form, async () => {
      const values = fields(form);
      if (values.password !== values.repeat) throw new ApiError(400, 'bad_repeat', t('setup.mismatch'));
      const done = await api('POST', 'password', { current: values.current, new: values.password });
      form.reset();
      const told = form.querySelector('#password-changed');
      told.textContent = tn('password.changed', done.sessions_ended);
      told.hidden = false;
    });
    return h('section', { class: 'card', id: 'password' }, h('h2', {}, t('password.title')), form);
  }

  function sessionsCard(list) {
    // "Sign out everywhere else" ends one's own other sessions (the owner ends others' one by one).
    const others = list.filter((s) => !s.current && (s.admin === 'owner' ? me.role === 'owner' : s.admin === me.login)).length;
    return h(
      'section',
      { class: 'card', id: 'sessions' },
      h('h2', {}, t('sessions.title')),
      h(
        'table',
        { class: 'list' },
        h('thead', {}, h('tr', {}, [me.role === 'owner' ? 'admins.admin' : null, 'sessions.where', 'sessions.browser', 'sessions.last_seen', ''].filter((k) => k !== null).map((k) => h('th', {}, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions')))))),
        h(
          'tbody',
          {},
          list.map((s) =>
            h(
              'tr',
              {},
              me.role === 'owner' ? h('td', { 'data-label': t('admins.admin') }, s.admin === 'owner' ? t('role.owner') : s.admin) : null,
              h('td', { 'data-label': t('sessions.where') }, s.address || '—', s.current ? h('span', { class: 'badge active' }, ' ', t('sessions.this_one')) : null),
              h('td', { 'data-label': t('sessions.browser') }, h('small', {}, s.browser || '—')),
              h('td', { 'data-label': t('sessions.last_seen') }, ago(s.last_seen)),
              h('td', {}, s.current ? '' : deleteButton(t('sessions.end'), t('sessions.end_confirm', { where: s.address }), `sessions/${s.id}`, { 'data-session': s.id })),
            ),
          ),
        ),
      ),
      others
        ? h('div', { class: 'actions' }, h('button', {
            type: 'button',
            class: 'ghost',
            id: 'end-other-sessions',
            onclick: async () => {
              if (!(await confirmAction(tn('sessions.end_others_confirm', others), t('sessions.end_others')))) return;
              try {
                await api('DELETE', 'sessions');
                route();
              } catch (err) {
                alertError(err);
              }
            },
          }, t('sessions.end_others')))
        : null,
    );
  }

  /** What nodes do with a device over a user's limit. */
  function devicePolicyForm(settings) {
    const form = h(
      'form',
      { class: 'card', id: 'device-policy-form' },
      h('h2', {}, t('devices.policy')),
      h('p', {}, t('devices.policy_intro')),
      field(
        t('devices.policy'),
        h('select', { name: 'device_policy' }, ['refuse', 'drop_oldest'].map((p) => h('option', { value: p, selected: settings.device_policy === p }, t(`devices.policy_${p}`)))),
      ),
      errorBox(),
      h('p', { class: 'notice', role: 'status', hidden: true }),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('save'))),
    );
    onSubmit(form, async () => {
      await api('PATCH', 'settings', { device_policy: fields(form).device_policy });
      const done = form.querySelector('.notice');
      done.textContent = t('settings.saved');
      done.hidden = false;
    });
    return form;
  }

  /** Where links and pushes go: the edge, and the base of links. */
  function addressesForm(settings, after) {
    const form = h(
      'form',
      { class: 'card', id: 'addresses-form' },
      h('h2', {}, t('settings.addresses')),
      h('p', {}, t('settings.addresses_intro')),
      field(t('settings.edge_url'), h('input', { name: 'edge_url', type: 'url', value: settings.edge_url || '', placeholder: 'https://hearth-edge.example.workers.dev' }), t('settings.edge_hint')),
      field(t('settings.sub_url'), h('input', { name: 'sub_url', type: 'url', value: settings.sub_url_set || '', placeholder: settings.sub_url }), t('settings.sub_hint')),
      errorBox(),
      h('p', { class: 'notice', role: 'status', hidden: true }),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('save'))),
    );
    onSubmit(form, async () => {
      const saved = await api('PATCH', 'settings', fields(form));
      const done = form.querySelector('.notice');
      done.textContent = t('settings.addresses_saved', { base: saved.sub_url });
      done.hidden = false;
      if (after) after();
    });
    return form;
  }

  /** The edges links are served from: each one's state, and a form to add one. */
  function edgesCard(edges) {
    const rows = edges.map((edge) => {
      const state = h(
        'select',
        { name: 'state', 'aria-label': t('edges.state_of', { name: edge.name }), 'data-edge': edge.name },
        ['active', 'blocked', 'retired'].map((s) => h('option', { value: s, selected: edge.state === s }, t(`edge.${s}`))),
      );
      state.addEventListener('change', async () => {
        try {
          await api('PATCH', `edges/${edge.id}`, { state: state.value });
          route();
        } catch (err) {
          alertError(err);
        }
      });
      const remove =
        edge.name === 'main'
          ? null
          : h('button', { type: 'button', class: 'ghost small danger', 'data-remove-edge': edge.name }, t('edges.remove'));
      if (remove) {
        remove.addEventListener('click', async () => {
          if (!(await confirmAction(t('edges.remove_confirm', { name: edge.name }), t('edges.remove')))) return;
          try {
            await api('DELETE', `edges/${edge.id}`);
            route();
          } catch (err) {
            alertError(err);
          }
        });
      }
      return h(
        'tr',
        {},
        h('th', { scope: 'row' }, edge.name, h('br'), h('small', {}, edge.link_base || edge.url)),
        h('td', {}, state),
        h('td', {}, remove),
      );
    });
    const form = h(
      'form',
      { id: 'edge-form' },
      h('h3', {}, t('edges.add')),
      field(t('edges.name'), h('input', { name: 'name', required: true, maxlength: 32, pattern: '[a-z0-9\\-]+' }), t('edges.name_hint')),
      field(t('edges.url'), h('input', { name: 'url', type: 'url', required: true, placeholder: 'https://hearth.example.workers.dev' })),
      field(t('edges.api_prefix'), h('input', { name: 'api_prefix', required: true, minlength: 16, maxlength: 64, autocomplete: 'off' })),
      field(t('edges.push_token'), h('input', { name: 'push_token', type: 'password', required: true, minlength: 16, autocomplete: 'off' })),
      field(t('edges.link_base'), h('input', { name: 'link_base', type: 'url', placeholder: 'https://sub.example.org/s' }), t('edges.link_base_hint')),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('edges.add'))),
    );
    onSubmit(form, async () => {
      const values = fields(form);
      if (!values.link_base) delete values.link_base;
      await api('POST', 'edges', values);
      route();
    });
    return h(
      'section',
      { class: 'card', id: 'edges' },
      h('h2', { id: 'edges-list-title' }, t('edges.title')),
      h('p', {}, t('edges.intro')),
      edges.length
        ? h(
            'table',
            { 'aria-labelledby': 'edges-list-title' },
            h('thead', {}, h('tr', {}, [t('overview.edge_name'), t('overview.edge_links'), h('span', { class: 'visually-hidden' }, t('edges.remove'))].map((x) => h('th', { scope: 'col' }, x)))),
            h('tbody', {}, rows),
          )
        : null,
      form,
    );
  }

  // ---- routing per user (the owner's) ---------------------------------------------------

  const OUTBOUND_TYPES = ['direct', 'socks5', 'http'];
  const IP_MODES = ['auto', 'v4', 'v6', 'prefer_v4', 'prefer_v6'];
  /** What an empty box for a new rule set shows: the syntax, by example (not words to translate). */
  const RULES_EXAMPLE = 'warp(suffix:netflix.com)\nreject(geoip:cn)\ndirect(all)';

  /** A refusal of rules (`bad_routing_rules`, its body `e`) in words: the line and column
   * (from 1) and what is wrong there; `named`: with the rule set's name, for a change made
   * elsewhere (an outbound a rule set names, removed). */
  function rulesError(e, named) {
    // control says "rule set NAME: line L, column C: PROBLEM"; the problem is what it adds.
    const problem = (e.message || '').replace(/^rule set [^:]*: /, '').replace(/^line \d+(, column \d+)?: /, '');
    let text = problem;
    if (e.line && e.column) text = t('routing.error_at', { line: number(e.line), column: number(e.column), problem });
    else if (e.line) text = t('routing.error_line', { line: number(e.line), problem });
    return named && e.rule_set ? t('routing.error_in', { name: e.rule_set, error: text }) : text;
  }

  /** Puts the caret of `box` at `line` and `column` (from 1; column 0: the line's start). */
  function caretAt(box, line, column) {
    const lines = box.value.split('\n');
    if (!line || line > lines.length) return;
    let at = 0;
    for (let i = 0; i < line - 1; i++) at += lines[i].length + 1;
    // control counts characters; a string's indices count UTF-16 units.
    if (column > 1) at += Array.from(lines[line - 1]).slice(0, column - 1).join('').length;
    box.focus();
    box.setSelectionRange(at, at);
  }

  /** Sends rules with `send`; a refusal of them is said beside their box (`submitting` puts
   * it there, the box named `rules`), in words with its line and column, and the caret goes
   * to the fault. */
  async function sendRules(box, name, send) {
    try {
      return await send();
    } catch (err) {
      const e = err.data?.error;
      if (err.code === 'bad_routing_rules' && e && e.rule_set === name) {
        err.message = rulesError(e, false);
        // Once `submitting` has shown the message and focused the box.
        setTimeout(() => caretAt(box, e.line, e.column));
      }
      throw err;
    }
  }

  /** A box of rules: monospace, one rule a line, as typed (no spelling, no wrapping). */
  function rulesBox(text, placeholder) {
    const rows = Math.min(20, Math.max(4, text.split('\n').length + 1));
    return h('textarea', { name: 'rules', class: 'rules', dir: 'ltr', rows, maxlength: 262144, spellcheck: 'false', autocapitalize: 'off', autocomplete: 'off', wrap: 'off', placeholder }, text);
  }

  /** The fields of an outbound (`o`: the one to change; none: a new one): its name, node and
   * type, then a proxy's server and login or a direct one's IP version, interface and source
   * addresses. The other kind's are hidden and disabled: the browser checks what is shown. */
  function outboundFields(o, nodes) {
    const type = o ? o.type : 'socks5';
    const text = (name, attrs, value) => h('input', { name, autocomplete: 'off', ...attrs, value: value || '' });
    const proxy = h(
      'fieldset',
      { class: 'outbound-kind' },
      h('legend', {}, t('routing.proxy')),
      field(t('routing.server'), text('server', { required: true, maxlength: 255, placeholder: '127.0.0.1:1080' }, o && o.server), t('routing.server_hint')),
      field(t('routing.username'), text('username', { maxlength: 255 }, o && o.username)),
      // Never shown: a change leaves it as it is unless a new one is typed.
      field(t('password'), h('input', { name: 'password', type: 'password', maxlength: 255, autocomplete: 'off' }), t(o && o.password_set ? 'routing.password_keep' : 'routing.password_hint')),
    );
    const direct = h(
      'fieldset',
      { class: 'outbound-kind' },
      h('legend', {}, t('routing.direct')),
      field(t('routing.ip_mode'), h('select', { name: 'ip_mode' }, IP_MODES.map((m) => h('option', { value: m, selected: ((o && o.ip_mode) || 'auto') === m }, t(`routing.ip_mode.${m}`))))),
      field(t('routing.interface'), text('interface', { maxlength: 15, placeholder: 'eth1' }, o && o.interface), t('routing.interface_hint')),
      field(t('routing.source_v4'), text('source_v4', { maxlength: 64, placeholder: '192.0.2.10' }, o && o.source_v4), t('routing.source_hint')),
      field(t('routing.source_v6'), text('source_v6', { maxlength: 64, placeholder: '2001:db8::10' }, o && o.source_v6), t('routing.source_hint')),
    );
    const show = (kind) => {
      proxy.hidden = proxy.disabled = kind === 'direct';
      direct.hidden = direct.disabled = kind !== 'direct';
    };
    show(type);
    return [
      field(t('routing.name'), text('name', { required: true, maxlength: 32, pattern: '[A-Za-z0-9_]+' }, o && o.name), t('routing.outbound_name_hint')),
      field(
        t('routing.node'),
        h('select', { name: 'node' }, h('option', { value: '' }, t('routing.every_node')), nodes.map((n) => h('option', { value: String(n.id), selected: Boolean(o) && o.node === n.id }, n.name))),
      ),
      field(t('routing.type'), h('select', { name: 'type', onchange: (e) => show(e.target.value) }, OUTBOUND_TYPES.map((k) => h('option', { value: k, selected: type === k }, t(`routing.type.${k}`))))),
      proxy,
      direct,
    ];
  }

  /** An outbound from its form, as the API takes it (a password only when one is typed). */
  function outboundInput(form) {
    const values = fields(form);
    // Node 0 is every node (left out, a change would keep the one it had).
    const input = { name: values.name, node: values.node ? Number(values.node) : 0, type: values.type };
    if (values.type === 'direct') {
      Object.assign(input, { ip_mode: values.ip_mode, interface: values.interface, source_v4: values.source_v4, source_v6: values.source_v6 });
    } else {
      Object.assign(input, { server: values.server, username: values.username });
      // As typed: a password may begin or end with a space.
      const password = form.elements.namedItem('password').value;
      if (password) input.password = password;
    }
    return input;
  }

  function outboundDialog(o, nodes) {
    const form = h('form', { id: 'outbound-edit' }, outboundFields(o, nodes), errorBox(), h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('save'))));
    const d = dialog(t('routing.change_outbound', { name: o.name }), form);
    onSubmit(form, async () => {
      const input = outboundInput(form);
      await api('PATCH', `outbounds/${o.id}`, input);
      d.close();
      flash = t('routing.outbound_saved', { name: input.name });
      route();
    });
  }

  /** The outbounds rules can send traffic to: each one (never its password: only whether it
   * has one), and a form to add one. */
  function outboundsCard(outbounds, nodes) {
    const nodeName = (id) => (id === null || id === undefined ? t('routing.every_node') : (nodes.find((n) => n.id === id) || { name: `#${id}` }).name);
    const where = (o) =>
      o.type === 'direct'
        ? [t(`routing.ip_mode.${o.ip_mode}`), o.interface, o.source_v4, o.source_v6].filter(Boolean).join(' · ')
        : [h('code', {}, o.server), o.username ? h('small', {}, ` · ${o.username}`) : null];
    const rows = outbounds.map((o) =>
      h(
        'tr',
        { 'data-outbound': o.name },
        h('th', { scope: 'row' }, o.name),
        h('td', { 'data-label': t('routing.node') }, nodeName(o.node)),
        h('td', { 'data-label': t('routing.type') }, t(`routing.type.${o.type}`)),
        h('td', { 'data-label': t('routing.where') }, where(o)),
        h('td', { 'data-label': t('password') }, o.type === 'direct' ? '—' : t(o.password_set ? 'routing.password_set' : 'routing.no_password')),
        h(
          'td',
          {},
          h(
            'span',
            { class: 'inline' },
            h('button', { type: 'button', class: 'ghost small', 'data-change-outbound': o.name, onclick: () => outboundDialog(o, nodes) }, t('routing.change')),
            deleteButton(t('routing.remove'), t('routing.remove_outbound_confirm', { name: o.name }), `outbounds/${o.id}`, { 'data-remove-outbound': o.name }),
          ),
        ),
      ),
    );
    const form = h(
      'form',
      { id: 'outbound-form' },
      h('h3', {}, t('routing.add_outbound')),
      outboundFields(null, nodes),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('routing.add_outbound'))),
    );
    onSubmit(form, async () => {
      const input = outboundInput(form);
      await api('POST', 'outbounds', input);
      flash = t('routing.outbound_added', { name: input.name });
      route();
    });
    return h(
      'section',
      { class: 'card', id: 'outbounds' },
      h('h2', { id: 'outbounds-title' }, t('routing.outbounds')),
      h('p', {}, t('routing.outbounds_intro')),
      outbounds.length
        ? h(
            'table',
            { class: 'list', 'aria-labelledby': 'outbounds-title' },
            h(
              'thead',
              {},
              h('tr', {}, [t('routing.name'), t('routing.node'), t('routing.type'), t('routing.where'), t('password'), h('span', { class: 'visually-hidden' }, t('actions'))].map((x) => h('th', { scope: 'col' }, x))),
            ),
            h('tbody', {}, rows),
          )
        : h('p', { class: 'empty' }, t('routing.no_outbounds')),
      form,
    );
  }

  /** One rule set: its name and rules, saved in place (a refusal said beside the rules, at
   * their line and column), and removed. */
  function ruleSetForm(set) {
    const title = `rule-set-${set.id}`;
    const box = rulesBox(set.rules);
    const done = h('p', { class: 'notice', role: 'status', hidden: true });
    const form = h(
      'form',
      { class: 'rule-set', 'data-rule-set': set.name, 'aria-labelledby': title },
      h('h3', { id: title }, set.name),
      h('p', {}, t('routing.given', { users: tn('routing.users_n', set.users), groups: tn('routing.groups_n', set.groups) })),
      field(t('routing.name'), h('input', { name: 'name', required: true, maxlength: 64, pattern: '[A-Za-z0-9_\\-]+', autocomplete: 'off', value: set.name })),
      field(t('routing.rules'), box),
      errorBox(),
      done,
      h(
        'div',
        { class: 'actions' },
        h('button', { type: 'submit' }, t('save')),
        deleteButton(t('routing.remove'), t('routing.remove_set_confirm', { name: set.name }), `rule-sets/${set.id}`, { 'data-remove-rule-set': set.name }),
      ),
    );
    let saved = { name: set.name, rules: set.rules };
    onSubmit(form, async () => {
      done.hidden = true;
      const now = { name: form.elements.namedItem('name').value.trim(), rules: box.value };
      const change = changedOnly(now, saved);
      if (Object.keys(change).length) await sendRules(box, now.name, () => api('PATCH', `rule-sets/${set.id}`, change));
      saved = now;
      form.dataset.ruleSet = now.name;
      form.querySelector('h3').textContent = now.name;
      done.textContent = t('routing.set_saved');
      done.hidden = false;
    });
    return form;
  }

  /** The rule sets: each one's rules to change, and a form to add one. */
  function ruleSetsCard(sets) {
    const box = rulesBox('', RULES_EXAMPLE);
    const add = h(
      'form',
      { id: 'rule-set-form' },
      h('h3', {}, t('routing.add_set')),
      field(t('routing.name'), h('input', { name: 'name', required: true, maxlength: 64, pattern: '[A-Za-z0-9_\\-]+', autocomplete: 'off', placeholder: 'streaming' }), t('routing.set_name_hint')),
      field(t('routing.rules'), box, t('routing.rules_hint')),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('routing.add_set'))),
    );
    onSubmit(add, async () => {
      const name = add.elements.namedItem('name').value.trim();
      await sendRules(box, name, () => api('POST', 'rule-sets', { name, rules: box.value }));
      flash = t('routing.set_added', { name });
      await route();
      // On to the new rule set's rules, where the keyboard left off.
      const added = [...document.querySelectorAll('form.rule-set')].find((f) => f.dataset.ruleSet === name);
      if (added) added.querySelector('textarea').focus();
    });
    return h(
      'section',
      { class: 'card', id: 'rule-sets' },
      h('h2', {}, t('routing.rule_sets')),
      h('p', {}, t('routing.rule_sets_intro')),
      sets.length ? sets.map(ruleSetForm) : h('p', { class: 'empty' }, t('routing.no_rule_sets')),
      add,
    );
  }

  /** Routing per user: the outbounds and the rule sets (Settings, the owner's). */
  async function routingView() {
    const [routing, nodes] = await Promise.all([api('GET', 'routing'), api('GET', 'nodes')]);
    shell(
      'settings/routing',
      h('p', {}, h('a', { href: '#/settings' }, t('notify.back'))),
      h('h1', {}, t('routing.title')),
      h('p', {}, t('routing.intro')),
      outboundsCard(routing.outbounds, nodes.nodes),
      ruleSetsCard(routing.rule_sets),
    );
  }

  /** The rule set a user or group is given (the owner's to choose); empty: none of its own. */
  function ruleSetField(sets, current, none, hint) {
    return field(
      t('routing.rule_set'),
      h('select', { name: 'rule_set' }, h('option', { value: '' }, t(none)), sets.map((s) => h('option', { value: s.name, selected: current === s.name }, s.name))),
      t(hint),
    );
  }

  async function settingsView() {
    if (!can('admin')) return accountView();
    const [totp, status, settings, edges, sessions, passkeys] = await Promise.all([
      me.role === 'owner' ? api('GET', 'totp') : null,
      api('GET', 'status'),
      api('GET', 'settings'),
      api('GET', 'edges'),
      api('GET', 'sessions'),
      api('GET', 'passkeys'),
    ]);
    const p = settings.profile;
    const profile = h(
      'form',
      { class: 'card', id: 'profile-form' },
      h('h2', {}, t('settings.profile')),
      h('p', {}, t('settings.profile_intro')),
      field(t('settings.title'), h('input', { name: 'title', required: true, value: p.title })),
      field(t('settings.announce'), h('textarea', { name: 'announce', rows: 2, maxlength: 200 }, p.announce || ''), t('settings.announce_hint')),
      field(t('settings.support_url'), h('input', { name: 'support_url', type: 'url', value: p.support_url || '', placeholder: 'https://t.me/...' })),
      field(t('settings.web_page_url'), h('input', { name: 'web_page_url', type: 'url', value: p.web_page_url || '' })),
      field(t('settings.interval'), h('input', { name: 'update_interval_hours', type: 'number', min: 1, max: 168, required: true, value: p.update_interval_hours, inputmode: 'numeric' })),
      errorBox(),
      h('p', { class: 'notice', role: 'status', hidden: true }),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('save'))),
    );
    onSubmit(profile, async () => {
      const values = fields(profile);
      values.update_interval_hours = Number(values.update_interval_hours);
      await api('PATCH', 'settings', { profile: values });
      const done = profile.querySelector('.notice');
      done.textContent = t('settings.saved');
      done.hidden = false;
    });
    const card = h('section', { class: 'card', id: 'totp' });
    const show = (...content) => card.replaceChildren(h('h2', {}, t('totp.title')), ...content);

    const off = h(
      'form',
      { class: 'inline', id: 'totp-off' },
      h('input', { name: 'password', type: 'password', autocomplete: 'current-password', required: true, placeholder: t('password'), 'aria-label': t('password') }),
      h('button', { type: 'submit', class: 'danger' }, t('totp.turn_off')),
      errorBox(),
    );
    onSubmit(off, async () => {
      await api('POST', 'totp/disable', { password: fields(off).password });
      route();
    });

    const begin = async (button) => {
      button.disabled = true;
      let enrollment;
      try {
        enrollment = await api('POST', 'totp/enroll', {});
      } catch (err) {
        button.disabled = false;
        return alertError(err);
      }
      const confirm = h(
        'form',
        { id: 'totp-confirm' },
        field(t('totp.code'), h('input', { name: 'code', autocomplete: 'one-time-code', inputmode: 'numeric', required: true, maxlength: 7 })),
        errorBox(),
        h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('totp.confirm'))),
      );
      onSubmit(confirm, async () => {
        const answer = await api('POST', 'totp/confirm', { code: fields(confirm).code });
        show(
          h('p', { role: 'status' }, t('totp.on_now')),
          h('p', {}, t('totp.recovery_once')),
          h('div', { class: 'secret', id: 'recovery-codes' }, h('code', {}, answer.recovery_codes.join('\n')), copyButton(answer.recovery_codes.join('\n'))),
          h('div', { class: 'actions' }, h('button', { type: 'button', id: 'totp-done', onclick: () => route() }, t('done'))),
        );
      });
      show(
        h('p', {}, t('totp.scan')),
        h('img', { class: 'qr', alt: t('totp.qr'), src: `data:image/svg+xml;charset=utf-8,${encodeURIComponent(enrollment.qr_svg)}` }),
        h('p', {}, t('totp.or_type')),
        h('div', { class: 'secret' }, h('code', { id: 'totp-secret' }, enrollment.secret), copyButton(enrollment.secret)),
        confirm,
      );
    };

    if (!totp) {
      card.hidden = true;
    } else if (totp.enabled) {
      show(
        h('p', {}, h('span', { class: 'badge active' }, t('totp.on')), ' ', tn('totp.recovery_left', totp.recovery_left)),
        h('p', {}, t('totp.off_hint')),
        off,
      );
    } else {
      show(
        h('p', {}, t('totp.intro')),
        h('div', { class: 'actions wrap' }, h('button', { type: 'button', id: 'totp-on', onclick: (e) => begin(e.target) }, t('totp.turn_on'))),
      );
    }

    shell(
      'settings',
      h('h1', {}, t('nav.settings')),
      h('p', {}, h('a', { href: '#/settings/notifications', id: 'to-notifications' }, t('notify.title')), ' · ', t('notify.link_hint')),
      // Where everyone's traffic goes is the owner's to say.
      me.role === 'owner' ? h('p', {}, h('a', { href: '#/settings/routing', id: 'to-routing' }, t('routing.title')), ' · ', t('routing.link_hint')) : null,
      profile,
      card,
      passwordCard(),
      passkeysCard(passkeys),
      sessionsCard(sessions.sessions),
      // Where links are served is the owner's to change.
      me.role === 'owner' ? addressesForm(settings) : null,
      me.role === 'owner' ? edgesCard(edges.edges) : null,
      devicePolicyForm(settings),
      importCard(),
      rulesForm(settings),
      h(
        'section',
        { class: 'card' },
        h('h2', {}, t('settings.server')),
        h('dl', {}, h('dt', {}, t('settings.root_key')), h('dd', {}, h('code', {}, status.keys.root))),
      ),
    );
  }

  /** Settings for an admin below the admin scope: who they are, where they are signed in. */
  async function accountView() {
    const [sessions, passkeys] = await Promise.all([api('GET', 'sessions'), api('GET', 'passkeys')]);
    shell(
      'settings',
      h('h1', {}, t('nav.settings')),
      h(
        'section',
        { class: 'card', id: 'account' },
        h('h2', {}, t('admins.you')),
        h('dl', {}, h('dt', {}, t('login')), h('dd', {}, me.login), h('dt', {}, t('admins.role')), h('dd', {}, t(`role.${me.role}`))),
        h('p', {}, t(`role.${me.role}.about`)),
      ),
      passwordCard(),
      passkeysCard(passkeys),
      sessionsCard(sessions.sessions),
    );
  }

  // ---- admins (the owner's) -------------------------------------------------------------

  const ROLES = ['admin', 'operator', 'read-only', 'reseller'];

  /** The fields of an admin's role and a reseller's limits (shown for a reseller only). */
  function roleFields(groups, admin) {
    const limits = h(
      'fieldset',
      { class: 'limits-fields', hidden: (admin ? admin.role : 'operator') !== 'reseller' },
      h('legend', {}, t('admins.limits')),
      field(t('admins.max_users'), h('input', { name: 'max_users', type: 'number', min: 0, step: 1, inputmode: 'numeric', value: admin && admin.max_users !== null ? String(admin.max_users) : '' }), t('admins.no_limit_hint')),
      field(t('admins.max_traffic_gib'), h('input', { name: 'max_traffic', type: 'number', min: 0, step: 'any', inputmode: 'decimal', value: admin && admin.max_traffic !== null ? String(admin.max_traffic / 2 ** 30) : '' }), t('admins.max_traffic_hint')),
      field(t('admins.max_slow'), h('input', { name: 'max_slow_speed', type: 'number', min: 0, step: 'any', inputmode: 'decimal', value: admin && admin.max_slow_speed !== null ? String(admin.max_slow_speed) : '' }), t('admins.max_slow_hint')),
      field(t('admins.max_days'), h('input', { name: 'max_days', type: 'number', min: 0, max: 36500, step: 1, inputmode: 'numeric', value: admin && admin.max_days !== null ? String(admin.max_days) : '' }), t('admins.max_days_hint')),
      groups.length
        ? h(
            'fieldset',
            { class: 'groups' },
            h('legend', {}, t('admins.groups')),
            groups.map((g) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: `group:${g.name}`, checked: admin ? admin.groups.includes(g.name) : false }), g.name)),
          )
        : null,
    );
    const role = h(
      'select',
      { name: 'role', onchange: (e) => (limits.hidden = e.target.value !== 'reseller') },
      ROLES.map((r) => h('option', { value: r, selected: (admin ? admin.role : 'operator') === r }, t(`role.${r}`))),
    );
    return [field(t('admins.role'), role, t('admins.role_hint')), limits];
  }

  /** An admin change from the form's values: a reseller's limits, or none. */
  function adminInput(values, groups) {
    const input = { role: values.role };
    if (values.role === 'reseller') {
      input.max_users = values.max_users === '' ? null : Number(values.max_users);
      input.max_traffic = values.max_traffic === '' ? null : Math.round(Number(values.max_traffic) * 2 ** 30);
      input.max_slow_speed = values.max_slow_speed === '' ? null : Number(values.max_slow_speed);
      input.max_days = values.max_days === '' ? null : Number(values.max_days);
      input.groups = groups.filter((g) => values[`group:${g.name}`]).map((g) => g.name);
    }
    if (values.password) input.password = values.password;
    return input;
  }

  function adminDialog(groups, admin) {
    const form = h(
      'form',
      { id: 'admin-form' },
      admin ? null : field(t('login'), h('input', { name: 'login', required: true, autocomplete: 'off' })),
      field(admin ? t('admins.new_password') : t('password'), h('input', { name: 'password', type: 'password', minlength: 10, maxlength: 256, required: !admin, autocomplete: 'new-password' }), admin ? t('admins.new_password_hint') : t('admins.password_hint')),
      // A password reset after a leak ends what the old one made: their API tokens too.
      admin ? h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'end_tokens', checked: true }), ' ', t('admins.end_tokens')) : null,
      roleFields(groups, admin),
      errorBox(),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, admin ? t('save') : t('admins.add'))),
    );
    const d = dialog(admin ? t('admins.edit', { login: admin.login }) : t('admins.new'), form);
    onSubmit(form, async () => {
      const values = fields(form);
      const input = adminInput(values, groups);
      if (admin && values.password && values.end_tokens) input.end_tokens = true;
      if (admin) await api('PATCH', `admins/${admin.id}`, input);
      else await api('POST', 'admins', { login: values.login, ...input });
      d.close();
      route();
    });
  }

  async function adminsView() {
    const [list, groups] = await Promise.all([api('GET', 'admins'), api('GET', 'groups')]);
    const limit = (used, max, show) => (max === null ? show(used) : t('admins.of', { used: show(used), max: show(max) }));
    shell(
      'admins',
      h('div', { class: 'title' }, h('h1', {}, t('nav.admins')), h('button', { type: 'button', id: 'new-admin', onclick: () => adminDialog(groups.groups) }, t('admins.new'))),
      h('p', {}, t('admins.intro')),
      list.admins.length
        ? h(
            'table',
            { class: 'list', id: 'admins' },
            h('thead', {}, h('tr', {}, ['login', 'admins.role', 'nav.users', 'admins.traffic_given', 'admins.groups', ''].map((k) => h('th', { scope: 'col' }, k ? t(k) : h('span', { class: 'visually-hidden' }, t('actions')))))),
            h(
              'tbody',
              {},
              list.admins.map((a) =>
                h(
                  'tr',
                  { 'data-admin': a.login },
                  h('td', { 'data-label': t('login') }, a.login),
                  h('td', { 'data-label': t('admins.role') }, t(`role.${a.role}`)),
                  h('td', { 'data-label': t('nav.users') }, limit(a.users, a.max_users, number)),
                  h('td', { 'data-label': t('admins.traffic_given') }, a.role === 'reseller' ? limit(a.allotted + a.spent, a.max_traffic, bytes) : '—'),
                  h('td', { 'data-label': t('admins.groups') }, a.role === 'reseller' ? a.groups.join(', ') || t('admins.no_groups') : '—'),
                  h(
                    'td',
                    {},
                    h('div', { class: 'actions' },
                      h('button', { type: 'button', class: 'ghost small', 'data-edit': a.login, onclick: () => adminDialog(groups.groups, a) }, t('admins.change')),
                      a.passkeys ? deleteButton(t('admins.forget_passkeys'), tn('admins.forget_passkeys_confirm', a.passkeys, { login: a.login }), `admins/${a.id}/passkeys`, { 'data-forget': a.login }) : null,
                      deleteButton(t('admins.remove'), t('admins.remove_confirm', { login: a.login }), `admins/${a.id}`, { 'data-remove': a.login }),
                    ),
                  ),
                ),
              ),
            ),
          )
        : h('p', { class: 'empty' }, t('admins.none')),
    );
  }

  window.addEventListener('hashchange', route);
  route();
})();
