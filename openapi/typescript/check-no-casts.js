// node check-no-casts.js FILE.ts...: exit 1, naming each place, if a file bypasses
// the type checker: `x as T`, `<T>x`, `x!`, `any`, or a @ts-ignore/-expect-error/
// -nocheck comment.  Reads the syntax tree (typescript's own parser), so strings
// and comments that merely contain these words are not flagged.
"use strict";
const fs = require("fs");
const ts = require("typescript");

const FORBIDDEN = {
  [ts.SyntaxKind.AsExpression]: "`as` cast",
  [ts.SyntaxKind.TypeAssertionExpression]: "`<T>` cast",
  [ts.SyntaxKind.NonNullExpression]: "`!` non-null assertion",
  [ts.SyntaxKind.AnyKeyword]: "`any`",
};

let found = 0;
for (const file of process.argv.slice(2)) {
  const text = fs.readFileSync(file, "utf8");
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const report = (node, what) => {
    const { line, character } = source.getLineAndCharacterOfPosition(node.getStart(source));
    console.error(`${file}:${line + 1}:${character + 1}: ${what}: ${node.getText(source)}`);
    found += 1;
  };
  const visit = (node) => {
    const what = FORBIDDEN[node.kind];
    if (what !== undefined) report(node, what);
    ts.forEachChild(node, visit);
  };
  visit(source);
  const directive = /@ts-(ignore|expect-error|nocheck)/g;
  for (const match of text.matchAll(directive)) {
    const { line } = source.getLineAndCharacterOfPosition(match.index);
    console.error(`${file}:${line + 1}: ${match[0]} comment`);
    found += 1;
  }
}
if (found > 0) {
  console.error(`${found} place(s) bypass the type checker`);
  process.exit(1);
}
