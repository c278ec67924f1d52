// eslint.config.mjs: typescript-eslint's recommended rules, with type
// information (the type-checked set), on the client's sources, tests,
// examples and benchmark. npm run lint runs it; scripts/lint-typescript.sh
// runs that and tsc --noEmit for make lint.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["src/gen/**", "dist/**", "build/**", "node_modules/**", "scripts/**", "eslint.config.mjs"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // node:test's describe and it return promises that the runner awaits.
      "@typescript-eslint/no-floating-promises": [
        "error",
        { allowForKnownSafeCalls: [{ from: "package", package: "node:test", name: ["describe", "it", "test", "suite"] }] },
      ],
      // Unused parameters named _x are kept for their position.
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
);
