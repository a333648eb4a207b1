/**
 * The Prometheus text exposition format, as much as `status` needs to read a worker's `/metrics`.
 *
 * @module
 */

/** One sample; `name` includes any `_bucket`/`_sum`/`_count` suffix, labels are unescaped. */
export interface PrometheusSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;
/** An opening quote and the characters and escapes (`\\`, `\"`, `\n`) of a label value after it. */
const QUOTED_VALUE = /^"(?:[^"\\]|\\[n\\"])*/;

/** A float, `+Inf`, `Inf`, `-Inf` or `NaN`; anything else is NaN too. */
function parseSampleValue(text: string): number {
  return /^([+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?Inf|NaN)$/.test(text)
    ? Number(text.replace("Inf", "Infinity"))
    : NaN;
}

/**
 * Parse the Prometheus text exposition format (version 0.0.4): comment lines (`# HELP`, `# TYPE`)
 * are skipped; label values may hold any character, `\\`, `\"` and `\n` escaped; a trailing
 * timestamp is ignored. A malformed line throws a SyntaxError naming its number and text.
 *
 * @example Reading one labelled gauge
 * ```ts
 * import { parsePrometheusText } from "./parse.ts";
 * const [sample] = parsePrometheusText('up{job="a"} 1\n');
 * if (sample?.labels.job !== "a" || sample.value !== 1) throw new Error();
 * ```
 */
export function parsePrometheusText(text: string): PrometheusSample[] {
  const samples: PrometheusSample[] = [];
  for (const [index, raw] of text.split("\n").entries()) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    const fail = (detail: string): never => {
      throw new SyntaxError(
        `Cannot parse Prometheus text at line ${index + 1}: ${detail}: ${JSON.stringify(line)}`,
      );
    };
    let rest = line.trimStart();
    if (rest === "" || rest.startsWith("#")) continue;
    const name = METRIC_NAME.exec(rest)?.[0] ?? fail("expected a metric name");
    rest = rest.slice(name.length);
    const labels: Record<string, string> = {};
    const afterName = rest.replace(/^[ \t]+/, "");
    if (afterName.startsWith("{")) {
      rest = afterName.slice(1).trimStart();
      while (!rest.startsWith("}")) {
        const label = LABEL_NAME.exec(rest)?.[0] ?? fail("expected a label name");
        rest = rest.slice(label.length).trimStart();
        if (!rest.startsWith("=")) fail(`expected "=" after label ${label}`);
        rest = rest.slice(1).trimStart();
        // The value up to its closing quote, or to the first bad escape or the end of the line.
        const quoted = QUOTED_VALUE.exec(rest)?.[0] ??
          fail(`expected a quoted value for label ${label}`);
        const stop = rest[quoted.length];
        if (stop === undefined) fail(`unterminated value of label ${label}`);
        if (stop === "\\") fail(`invalid escape in the value of label ${label}`);
        if (Object.hasOwn(labels, label)) fail(`label ${label} given twice`);
        labels[label] = quoted.slice(1).replace(/\\(.)/g, (_, c: string) => c === "n" ? "\n" : c);
        rest = rest.slice(quoted.length + 1).trimStart();
        if (rest.startsWith(",")) rest = rest.slice(1).trimStart();
        else if (!rest.startsWith("}")) fail(`expected "," or "}" after label ${label}`);
      }
      rest = rest.slice(1);
    } else if (!/^[ \t]/.test(rest)) {
      fail("expected whitespace before the value");
    }
    const fields = rest.trim().split(/[ \t]+/);
    if (fields.length > 2) fail("unexpected text after the timestamp");
    const [valueText = "", timestamp] = fields;
    const value = parseSampleValue(valueText);
    if (Number.isNaN(value) && valueText !== "NaN") fail(`invalid value "${valueText}"`);
    if (!/^-?\d+$/.test(timestamp ?? "0")) fail(`invalid timestamp "${timestamp}"`);
    samples.push({ name, labels, value });
  }
  return samples;
}

/**
 * The value of the first sample with a name and (a superset of) the given labels, or null.
 *
 * @example
 * ```ts
 * import { parsePrometheusText, sampleValue } from "./parse.ts";
 * const samples = parsePrometheusText('q{queue_name="a"} 3\nq{queue_name="b"} 4\n');
 * if (sampleValue(samples, "q", { queue_name: "b" }) !== 4) throw new Error();
 * ```
 */
export function sampleValue(
  samples: readonly PrometheusSample[],
  name: string,
  labels: Readonly<Record<string, string>> = {},
): number | null {
  const match = samples.find((s) =>
    s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
  );
  return match?.value ?? null;
}
