// The console's build: one static bundle in dist/, served by ledgerd at /console/
// (app/console.py).  Everything is bundled: the page loads nothing from outside
// the node.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/console/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsInlineLimit: 0,
    sourcemap: false,
    target: "es2020",
  },
});
