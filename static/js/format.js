// How Plimsoll writes a measured figure in a chart: the twin of portal/formatting.py, rule for
// rule (read its docstring for the rules). tests/portal/test_formatting.py runs one table of
// values through both and requires the same strings, so a figure reads the same in a table,
// a sentence and a chart's tooltip. Exposed as window.PlimsollFormat.
(function () {
  "use strict";
  const MISSING = "—";
  const SIGNIFICANT = 3;
  const SIZE_UNITS = ["B", "KB", "MB", "GB", "TB"];

  function num(value) {
    if (value === null || value === undefined || value === "" || typeof value === "boolean") return null;
    const v = Number(value);
    return Number.isFinite(v) ? v : null;
  }

  function grouped(whole) {
    return whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  // toFixed rounds half away from zero on the exact binary value: formatting.fixed does the same.
  function fixed(value, decimals) {
    const text = Math.abs(value).toFixed(decimals);
    const dot = text.indexOf(".");
    const whole = dot === -1 ? text : text.slice(0, dot);
    const fraction = dot === -1 ? "" : text.slice(dot + 1);
    const sign = value < 0 && /[1-9]/.test(text) ? "−" : "";
    return sign + grouped(String(Number(whole))) + (fraction ? "." + fraction : "");
  }

  function trim(text) {
    return text.indexOf(".") === -1 ? text : text.replace(/0+$/, "").replace(/\.$/, "");
  }

  function significantDecimals(value) {
    if (value === 0) return 0;
    const magnitude = Math.floor(Math.log10(Math.abs(value)));
    return Math.max(0, SIGNIFICANT - 1 - magnitude);
  }

  function plain(text) {
    return Number(text.replace(/,/g, "").replace("−", "-"));
  }

  function significant(value) {
    const decimals = significantDecimals(value);
    let text = fixed(value, decimals);
    const carried = Math.abs(plain(text));
    if (decimals && carried && significantDecimals(carried) < decimals) {
      text = fixed(value, significantDecimals(carried));
    }
    return trim(text);
  }

  function durationMs(value, scale) {
    const v = num(value);
    if (v === null) return MISSING;
    if (v === 0 && scale !== "s") return "0 ms";
    if (scale === "s" || ((scale === null || scale === undefined) && Math.abs(plain(significant(v))) >= 1000)) {
      return significant(v / 1000) + " s";
    }
    return significant(v) + " ms";
  }

  function durationScale() {
    const present = Array.from(arguments).map(num).filter((v) => v !== null).map(Math.abs);
    return present.length && Math.max.apply(null, present) >= 999.5 ? "s" : "ms";
  }

  function rate(value) {
    const v = num(value);
    if (v === null) return MISSING;
    const size = Math.abs(v);
    return trim(fixed(v, size >= 99.5 ? 0 : size >= 9.995 ? 1 : 2));
  }

  function percent(value) {
    const v = num(value);
    if (v === null) return MISSING;
    return trim(fixed(v, Math.abs(v) < 9.995 ? 2 : 1)) + " %";
  }

  function size(value) {
    let v = num(value);
    if (v === null) return MISSING;
    let unit = 0;
    while (Math.abs(v) >= 1023.5 && unit < SIZE_UNITS.length - 1) {
      v /= 1024;
      unit += 1;
    }
    return (unit === 0 ? fixed(v, 0) : significant(v)) + " " + SIZE_UNITS[unit];
  }

  function number(value, unit) {
    const v = num(value);
    if (v === null) return MISSING;
    const text = v === Math.trunc(v) ? fixed(v, 0) : significant(v);
    return unit ? text + " " + unit : text;
  }

  function seconds(value) {
    const v = num(value);
    if (v === null) return MISSING;
    const whole = Number(Math.abs(v).toFixed(0));
    if (whole < 60) return whole + " s";
    if (whole < 3600) {
      const m = Math.floor(whole / 60), s = whole % 60;
      return s ? m + " min " + s + " s" : m + " min";
    }
    const h = Math.floor(whole / 3600), rest = Math.floor((whole % 3600) / 60);
    return rest ? grouped(String(h)) + " h " + rest + " min" : grouped(String(h)) + " h";
  }

  // A server's figure in its series' unit (named by the column or axis title, not repeated).
  function figure(value, unit) {
    const v = num(value);
    if (v === null) return MISSING;
    unit = unit || "";
    if (unit.endsWith("/s")) return rate(v);
    if (unit === "%") return percent(v).replace(/ %$/, "");
    return number(v);
  }

  window.PlimsollFormat = {
    MISSING: MISSING,
    fixed: fixed,
    significant: significant,
    duration_ms: durationMs,
    durationMs: durationMs,
    durationScale: durationScale,
    rate: rate,
    percent: percent,
    size: size,
    number: number,
    seconds: seconds,
    figure: figure,
  };
})();
