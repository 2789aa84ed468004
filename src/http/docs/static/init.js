// Renders this server's /openapi.json with Swagger UI, served by this server: no CDN, no
// validator badge (it would send the document to validator.swagger.io), no remote config.
/* global SwaggerUIBundle */
SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  queryConfigEnabled: false,
  deepLinking: false,
});
