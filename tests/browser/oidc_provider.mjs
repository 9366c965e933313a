// A real OpenID Connect provider (the oidc-provider package) for the browser suite.
//
//   MINDROUTER_BROWSER_NODE_PATH=... node oidc_provider.mjs PORT CLIENT_ID CLIENT_SECRET REDIRECT_URI
//
// Its development sign-in form accepts any user name (and any password); the account's claims
// are its name as preferred_username and, for names starting with "staff-", the group
// "cs-staff". Prints "ready ISSUER" once it listens.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

// Installed by scripts/browser into a cache outside the clone (ES modules ignore NODE_PATH).
const modules = process.env.MINDROUTER_BROWSER_NODE_PATH;
const { default: Provider } = await import(
  pathToFileURL(join(modules, "oidc-provider", "lib", "index.js")).href
);

const [port, clientId, clientSecret, redirectUri] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      grant_types: ["authorization_code"],
      response_types: ["code"],
    },
  ],
  claims: { openid: ["sub"], profile: ["preferred_username", "groups"] },
  // The console reads the user's name and groups from the ID token itself.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  cookies: { keys: ["browser-suite-cookie-key"] },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          preferred_username: id,
          groups: id.startsWith("staff-") ? ["cs-staff"] : [],
        };
      },
    };
  },
});
provider.proxy = false;
provider.listen(Number(port), "127.0.0.1", () => {
  console.log(`ready ${issuer}`);
});
