# Sourced by the entrypoint: the VNC password (= the token) in a file only root can read. VNC's
# authentication uses the password's first 8 characters. printf is a bash builtin: no argv shows it.
# In pool mode there is no token before the claim: no file, and the VNC server stays off (30-vnc).
if [[ -n ${SECRET_TOKEN:-} ]]; then
  ( umask 077 && printf '%s\n' "$SECRET_TOKEN" > /run/boxd/vncpasswd )
fi
