/**
 * House lint rules (style.md §2.6), loaded by `deno lint` through deno.json:
 *
 * - `statusengine/no-default-export`: named exports only, so a symbol has one
 *   name everywhere (style.md §2.2).
 * - `statusengine/no-floating-async-call`: a heuristic for promises nobody
 *   awaits: a statement that only calls an async function declared in the
 *   same file, or a `.then()` without a rejection handler. Deliberate
 *   detachment is written `void task()` (style.md §2.5).
 *
 * @module
 */

// deno-lint-ignore-file statusengine/no-default-export
const plugin: Deno.lint.Plugin = {
  name: "statusengine",
  rules: {
    "no-default-export": {
      create(context) {
        return {
          ExportDefaultDeclaration(node) {
            context.report({ node, message: "Use a named export instead of a default export" });
          },
        };
      },
    },
    "no-floating-async-call": {
      create(context) {
        const asyncNames = new Set<string>();
        return {
          FunctionDeclaration(node) {
            if (node.async && node.id) asyncNames.add(node.id.name);
          },
          VariableDeclarator(node) {
            const init = node.init;
            if (
              node.id.type === "Identifier" && init !== null && init !== undefined &&
              (init.type === "ArrowFunctionExpression" || init.type === "FunctionExpression") &&
              init.async
            ) {
              asyncNames.add(node.id.name);
            }
          },
          "ExpressionStatement > CallExpression"(node: Deno.lint.CallExpression) {
            const callee = node.callee;
            if (callee.type === "Identifier" && asyncNames.has(callee.name)) {
              context.report({
                node,
                message:
                  `The promise of async "${callee.name}()" is dropped: await it, return it, or write "void ${callee.name}()" and let it handle its errors`,
              });
            }
            if (
              callee.type === "MemberExpression" && callee.property.type === "Identifier" &&
              callee.property.name === "then" && node.arguments.length < 2
            ) {
              context.report({
                node,
                message: '".then()" without a rejection handler drops errors: await it or add one',
              });
            }
          },
        };
      },
    },
  },
};

export default plugin;
