// Run in the page by tests/console/test_console_a11y.py: every visible element holding
// text, with its contrast ratio against the background it is drawn on (WCAG 2 formula),
// and every form control without an accessible name.
const channels = (c) => (c.match(/[\d.]+/g) || []).map(Number);
const linear = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
const luminance = ([r, g, b]) => 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
function background(el) {
  for (; el; el = el.parentElement) {
    const c = channels(getComputedStyle(el).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
  }
  return [255, 255, 255];
}
const visible = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== "hidden"; };
const texts = [];
for (const el of document.querySelectorAll("body *")) {
  if (!visible(el) || el.disabled || el.closest("[disabled]")) continue;
  const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  if (!own && !["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName)) continue;
  const fg = luminance(channels(getComputedStyle(el).color).slice(0, 3));
  const bg = luminance(background(el));
  const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
  texts.push([`${el.tagName.toLowerCase()}.${el.className} "${(el.textContent || el.value || "").trim().slice(0, 30)}"`, Math.round(ratio * 100) / 100]);
}
const unnamed = [...document.querySelectorAll("input, select, textarea, button")]
  .filter((el) => visible(el) && !(el.labels && el.labels.length) && !el.getAttribute("aria-label") && !(el.textContent || "").trim())
  .map((el) => el.outerHTML.slice(0, 80));
return { texts, unnamed };
