// Numbers for people: sizes in KiB or MiB, shares in percent (never a bare 100% or 0% for
// what is only nearly so).

export const kib = (bytes) => bytes / 1024;
export function fmtKiB(bytes) {
  const k = kib(bytes);
  return k >= 1024 ? `${(k / 1024).toFixed(1)} MiB` : `${Math.round(k)} KiB`;
}
export const pct = (x) => (x >= 0.995 && x < 1 ? "over 99" : x < 0.01 && x > 0 ? "under 1" : String(Math.round(100 * x)));
// Finer shares for figures close to certainty (e.g. 99.97), never a bare 100.
export function pctFine(x) {
  if (x >= 0.9999) return "over 99.99";
  if (x >= 0.99) return (100 * x).toFixed(2);
  return String(Math.round(100 * x));
}
// "a" or "an" before a word read aloud ("an ankle boot", "a bag", "an 8").
export function article(word) {
  return /^[aeiou8]/i.test(String(word)) ? "an" : "a";
}
// "1 region", "3 regions".
export function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}
// Whole KiB with thousands separators ("1,423 KiB").
export function fmtKiBWhole(bytes) {
  return `${Math.ceil(kib(bytes)).toLocaleString("en-US")} KiB`;
}
