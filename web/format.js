// Numbers for people: sizes in KiB or MiB, shares in percent (never a bare 100% or 0% for
// what is only nearly so).

export const kib = (bytes) => bytes / 1024;
export function fmtKiB(bytes) {
  const k = kib(bytes);
  return k >= 1024 ? `${(k / 1024).toFixed(1)} MiB` : `${Math.round(k)} KiB`;
}
export const pct = (x) => (x >= 0.995 && x < 1 ? "over 99" : x < 0.01 && x > 0 ? "under 1" : String(Math.round(100 * x)));
