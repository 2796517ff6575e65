# Sourced by the entrypoint: the VNC password (= the token) in a file only root can read. VNC's
# authentication uses the password's first 8 characters. printf is a bash builtin: no argv shows it.
( umask 077 && printf '%s\n' "$SECRET_TOKEN" > /run/boxd/vncpasswd )
