/* The floor of the start figure (bench/start.py): what exec, bind and one answer cost on this machine,
 * measured the same way as the servers. It listens on 127.0.0.1:<port> (its only argument) and answers
 * every request `200 OK`; SIGTERM ends it. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int on = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons((unsigned short)atoi(argv[1]));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 128) != 0)
        return 1;
    static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK";
    for (;;) {
        int connection = accept(listener, NULL, NULL);
        if (connection < 0)
            continue;
        char request[4096];
        if (read(connection, request, sizeof request) > 0)
            (void)!write(connection, answer, sizeof answer - 1);
        close(connection);
    }
}
