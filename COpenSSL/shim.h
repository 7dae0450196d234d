// The system's OpenSSL (Debian's libssl-dev), for TLS to etcd (DESIGN.md §8b).
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

// Macros Swift does not import.
static inline long skynet_ssl_set_sni(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
