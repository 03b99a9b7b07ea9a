// An error the dashboard shows as an HTML page with its status.
export class PageError extends Error {
  readonly statusCode: number;
  constructor(statusCode: number, message: string) {
    super(message);
    this.statusCode = statusCode;
  }
}

// Another team's resource is indistinguishable from a missing one.
export const pageNotFound = () => new PageError(404, 'This page does not exist, or it belongs to another team.');
